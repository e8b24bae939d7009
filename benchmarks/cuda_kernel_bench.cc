// CUDA kernel bandwidth as a ratio of a device-to-device cudaMemcpy of the same input, timed in the
// same run (issue 3's measure). For each size (16M, 64M, 256M floats by default) and kernel: the median
// of --reps timed launches (CUDA events), the effective bandwidth (bytes the kernel must read + write)
// and that bandwidth over the memcpy's (2 x 4n bytes). Prints a table; --csv FILE also writes CSV.
//   gradcomp_cuda_bench [--sizes 16777216,67108864] [--reps 20] [--csv out.csv]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/block_scale_kernels.cuh"
#include "kernels/cuda/cast_kernels.cuh"

namespace {

#define CHECK(call)                                                                              \
  do {                                                                                           \
    const cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)

double medianMs(int reps, const std::function<void()>& launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  launch();  // warm-up
  CHECK(cudaDeviceSynchronize());
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::vector<size_t> parseSizes(const char* text) {
  std::vector<size_t> v;
  std::string s(text);
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t c = s.find(',', pos);
    v.push_back(std::stoull(s.substr(pos, c - pos)));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gradcomp;
  std::vector<size_t> sizes = {size_t{1} << 24, size_t{1} << 26, size_t{1} << 28};
  int reps = 20;
  const char* csvPath = nullptr;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--sizes") sizes = parseSizes(argv[i + 1]);
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else if (a == "--csv") csvPath = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  FILE* csv = csvPath ? std::fopen(csvPath, "w") : nullptr;
  if (csv) std::fprintf(csv, "gpu,kernel,floats,ms,gbps,ratio_vs_memcpy\n");
  std::printf("# %s, %d reps (median); ratio = kernel bandwidth (bytes read + written) / D2D memcpy bandwidth\n",
              prop.name, reps);
  std::printf("%-28s %12s %10s %10s %8s\n", "kernel", "floats", "ms", "GB/s", "ratio");
  for (size_t n : sizes) {
    float *x, *y, *residual, *scales;
    void* codes;
    unsigned long long* sat;
    CHECK(cudaMalloc(&x, n * 4));
    CHECK(cudaMalloc(&y, n * 4));
    CHECK(cudaMalloc(&residual, n * 4));
    CHECK(cudaMalloc(&codes, n * 2));
    CHECK(cudaMalloc(&scales, (n / 32 + 1) * 4));
    CHECK(cudaMalloc(&sat, 8));
    CHECK(cudaMemset(x, 0x3c, n * 4));  // 0.0115 everywhere: finite, no saturation
    CHECK(cudaMemset(y, 0, n * 4));
    const double memcpyMs = medianMs(reps, [&] { CHECK(cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice)); });
    const double memcpyGbps = 2.0 * n * 4 / (memcpyMs * 1e-3) / 1e9;
    struct Case {
      const char* name;
      double bytes;  // read + written
      std::function<void()> run;
    };
    const scalar::RngStream rng = scalar::RngStream::make(1, 0, 0, 0);
    const auto i8 = static_cast<int8_t*>(codes);
    const auto u8 = static_cast<uint8_t*>(codes);
    const auto u16 = static_cast<uint16_t*>(codes);
    const double f = static_cast<double>(n);
    const std::vector<Case> cases = {
        {"memcpy D2D", 8 * f, [&] { CHECK(cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice)); }},
        {"fp16 encode", 6 * f, [&] { CHECK(cuda::launchEncodeFp16(x, n, 1.0f, u16, sat, nullptr)); }},
        {"fp16 decode-accumulate", 10 * f, [&] { CHECK(cuda::launchDecodeFp16(u16, n, 1.0f, y, true, nullptr)); }},
        {"bf16 encode", 6 * f, [&] { CHECK(cuda::launchEncodeBf16(x, n, u16, sat, nullptr)); }},
        {"int8 encode (block 256)", 5 * f, [&] { CHECK(cuda::launchEncodeInt8Blocks(x, n, 256, false, rng, 0, i8, scales, nullptr, nullptr)); }},
        {"int8 encode + ef", 9 * f, [&] { CHECK(cuda::launchEncodeInt8Blocks(x, n, 256, false, rng, 0, i8, scales, residual, nullptr)); }},
        {"int8 stochastic encode", 5 * f, [&] { CHECK(cuda::launchEncodeInt8Blocks(x, n, 256, true, rng, 0, i8, scales, nullptr, nullptr)); }},
        {"int8 decode-accumulate", 9 * f, [&] { CHECK(cuda::launchDecodeInt8Blocks(i8, n, 256, scales, y, true, nullptr)); }},
        {"fp8-e4m3 encode (block 128)", 5 * f, [&] { CHECK(cuda::launchEncodeFp8Blocks(x, n, 128, scalar::Fp8Format::E4M3, u8, scales, sat, nullptr, nullptr)); }},
        {"fp8-e4m3 encode + ef", 9 * f, [&] { CHECK(cuda::launchEncodeFp8Blocks(x, n, 128, scalar::Fp8Format::E4M3, u8, scales, sat, residual, nullptr)); }},
        {"fp8-e4m3 decode-accumulate", 9 * f, [&] { CHECK(cuda::launchDecodeFp8Blocks(u8, n, 128, scalar::Fp8Format::E4M3, scales, y, true, nullptr)); }},
        {"sign encode (block 1024)", 4.125 * f, [&] { CHECK(cuda::launchEncodeSignBlocks(x, n, 1024, u8, scales, nullptr, nullptr)); }},
        {"sign encode + ef", 8.125 * f, [&] { CHECK(cuda::launchEncodeSignBlocks(x, n, 1024, u8, scales, residual, nullptr)); }},
        {"sign decode-accumulate", 8.125 * f, [&] { CHECK(cuda::launchDecodeSignBlocks(u8, n, 1024, scales, y, true, nullptr)); }},
    };
    for (const auto& c : cases) {
      const double ms = medianMs(reps, c.run);
      const double gbps = c.bytes / (ms * 1e-3) / 1e9;
      std::printf("%-28s %12zu %10.3f %10.1f %8.2f\n", c.name, n, ms, gbps, gbps / memcpyGbps);
      if (csv) std::fprintf(csv, "%s,%s,%zu,%.4f,%.2f,%.3f\n", prop.name, c.name, n, ms, gbps, gbps / memcpyGbps);
    }
    cudaFree(x);
    cudaFree(y);
    cudaFree(residual);
    cudaFree(codes);
    cudaFree(scales);
    cudaFree(sat);
  }
  if (csv) std::fclose(csv);
  return 0;
}
