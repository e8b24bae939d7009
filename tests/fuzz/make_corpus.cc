// Writes the decoder fuzzer's seeds.
//   CORPUS_DIR: one real encoder output per codec configuration and size, plus encodings of inputs at the
//               edges of fp32 (+-FLT_MAX, norms beyond FLT_MAX, subnormal blocks): every one must decode
//               to finite values.
//   REGRESSION_DIR: forged wires that decoders once accepted although they decode to Inf/NaN (a scale,
//               pre-scale, norm or value that is finite but overflows in use); every one must be refused.
// Usage: make_corpus CORPUS_DIR [REGRESSION_DIR]
#include <cfloat>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "compressors/registry.h"

namespace {

using namespace gradcomp;

std::vector<std::byte> encode(const Compressor& c, const std::vector<float>& x) {
  const size_t cap = c.maxEncodedBytes(x.size());
  std::vector<std::byte> storage(cap + 16);
  auto* p = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(storage.data()) + 15) & ~uintptr_t(15));
  const EncodeResult r = c.encode(x, {p, cap}, EncodeContext{7, 0, 1, 2, 0});
  return {p, p + r.wireBytes};
}

void write(const std::string& dir, std::string name, const std::vector<std::byte>& bytes) {
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void poke(std::vector<std::byte>& w, size_t offset, float v) { std::memcpy(w.data() + offset, &v, 4); }

void resign(std::vector<std::byte>& w, void (*edit)(WireHeader&)) {
  WireHeader h;
  std::memcpy(&h, w.data(), sizeof h);
  edit(h);
  h.checksum = headerChecksum(h);
  std::memcpy(w.data(), &h, sizeof h);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [REGRESSION_DIR]\n", argv[0]);
    return 2;
  }
  const std::vector<std::string> specs = {"none", "fp16", "bf16", "fp8-e4m3:block=8", "fp8-e5m2", "int8:block=5",
                                          "int8:rounding=stochastic", "qsgd:bits=3,block=7", "terngrad:block=6",
                                          "topk:k=4", "topk:k=3,values=fp16", "randomk:k=5", "randomk:k=2,values=fp16,unbiased=true",
                                          "threshold:k=3", "sign:block=5", "onebit:block=9", "mxfp8",
                                          "mxfp8:elem=e5m2", "mxfp6:block=8", "mxfp6:elem=e3m2", "mxfp4:block=8",
                                          "nvfp4", "int4:block=6", "int4:rounding=stochastic",
                                          "int4:rotate=hadamard,rblock=8", "mxfp4:rotate=hadamard,rblock=16",
                                          "int8:rounding=stochastic,rounding_bits=8", "terngrad:block=6,rounding_bits=8",
                                          "qsgd:bits=3,block=7,rounding_bits=8"};
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  int files = 0;
  for (const auto& spec : specs) {
    auto c = makeCompressor(spec);
    for (size_t n : {0, 1, 9, 40}) {
      std::vector<float> x(n);
      for (auto& v : x) v = d(rng);
      write(argv[1], spec + "_n" + std::to_string(n), encode(*c, x));
      ++files;
    }
  }
  // Edge inputs: encoders must produce wires that decode to finite values.
  const std::vector<float> extremes = {FLT_MAX, -FLT_MAX, 2.41e38f, 2.41e38f, 0.0f, -3e38f, 1.0f, 1e-30f, 0.0f};
  const std::vector<float> tiny = {1e-39f, 0.0f, -1e-39f, 1.4e-45f, 0.0f, 3e-41f, -2e-44f, 0.0f, 1e-39f};
  for (const char* spec : {"int8:block=5", "fp8-e4m3:block=8", "fp8-e5m2", "qsgd:bits=8,block=4", "qsgd:bits=4",
                           "terngrad:block=6", "randomk:k=3,unbiased=true", "sign:block=5", "onebit:block=9",
                           "mxfp8:block=8", "mxfp8:elem=e5m2,block=8", "mxfp6:block=8", "mxfp6:elem=e3m2,block=8",
                           "mxfp4:block=8", "nvfp4", "int4:block=5", "int8:rotate=hadamard,rblock=4"}) {
    auto c = makeCompressor(spec);
    write(argv[1], std::string(spec) + "_extremes", encode(*c, extremes));
    write(argv[1], std::string(spec) + "_tiny", encode(*c, tiny));
    files += 2;
  }
  std::printf("wrote %d corpus files to %s\n", files, argv[1]);
  if (argc == 2) return 0;

  // Forged wires, each the minimal case of a decoder that accepted a factor whose use overflows.
  const std::vector<float> x = {0.5f, -1.0f, 0.25f, 2.0f, -0.125f, 1.5f, 0.0f, -2.0f};
  int forged = 0;
  auto forge = [&](const char* name, const char* spec, auto&& edit) {
    auto w = encode(*makeCompressor(spec), x);
    edit(w);
    write(argv[2], name, w);
    ++forged;
  };
  forge("int8_scale_1e-40", "int8", [](auto& w) { poke(w, kWireHeaderBytes, 1e-40f); });
  forge("fp8_e4m3_scale_1e-38", "fp8-e4m3", [](auto& w) { poke(w, kWireHeaderBytes, 1e-38f); });
  forge("fp8_e5m2_scale_1e-36", "fp8-e5m2", [](auto& w) { poke(w, kWireHeaderBytes, 1e-36f); });
  forge("fp16_prescale_1_2e-38", "fp16", [](auto& w) {
    resign(w, [](WireHeader& h) {
      const float p = 1.2e-38f;
      std::memcpy(&h.param, &p, 4);
    });
  });
  forge("qsgd8_norm_fltmax", "qsgd:bits=8", [](auto& w) { poke(w, kWireHeaderBytes, FLT_MAX); });
  forge("randomk_unbiased_value_overflows", "randomk:k=2,unbiased=true",
        [](auto& w) { poke(w, kWireHeaderBytes + 16, 1e38f); });  // x 4 = 4e38
  // MX: E8M0 scale 2^120 makes 448 x scale overflow (the largest accepted for E4M3 is 2^119).
  forge("mxfp8_scale_2p120", "mxfp8", [](auto& w) { w[kWireHeaderBytes] = std::byte{247}; });
  forge("mxfp4_scale_nan", "mxfp4", [](auto& w) { w[kWireHeaderBytes] = std::byte{0xff}; });
  // NVFP4: a tensor scale with 6 x 448 x t = Inf.
  forge("nvfp4_tensor_scale_overflows", "nvfp4", [](auto& w) {
    resign(w, [](WireHeader& h) {
      const float t = FLT_MAX / 1000.0f;
      std::memcpy(&h.param, &t, 4);
    });
  });
  forge("int4_scale_1e-38", "int4", [](auto& w) { poke(w, kWireHeaderBytes, 1e-38f); });
  std::printf("wrote %d regression files to %s\n", forged, argv[2]);
  return 0;
}
