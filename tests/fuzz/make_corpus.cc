// Writes the decoder fuzzer's seed corpus: one real encoder output per codec configuration and size.
// Usage: make_corpus DIR
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "compressors/registry.h"

int main(int argc, char** argv) {
  using namespace gradcomp;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::vector<std::string> specs = {"none", "fp16", "bf16", "fp8-e4m3:block=8", "fp8-e5m2", "int8:block=5",
                                          "int8:rounding=stochastic", "qsgd:bits=3,block=7", "terngrad:block=6",
                                          "topk:k=4", "topk:k=3,values=fp16", "randomk:k=5", "randomk:k=2,values=fp16,unbiased=true",
                                          "threshold:k=3", "sign:block=5", "onebit:block=9"};
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  int files = 0;
  for (const auto& spec : specs) {
    auto c = makeCompressor(spec);
    for (size_t n : {0, 1, 9, 40}) {
      std::vector<float> x(n);
      for (auto& v : x) v = d(rng);
      std::vector<std::byte> wire(c->maxEncodedBytes(n) + 16);
      auto* p = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(wire.data()) + 15) & ~uintptr_t(15));
      const EncodeResult r = c->encode(x, {p, c->maxEncodedBytes(n)}, EncodeContext{7, 0, 1, 2, 0});
      std::string name = spec + "_n" + std::to_string(n);
      for (char& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      std::ofstream(std::string(argv[1]) + "/" + name, std::ios::binary)
          .write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(r.wireBytes));
      ++files;
    }
  }
  std::printf("wrote %d corpus files to %s\n", files, argv[1]);
  return 0;
}
