// CUDA kernel bandwidth, as issue 3 measures it: for each size (16M, 64M, 256M floats by default) and
// kernel, the median of --reps timed runs (CUDA events), the effective bandwidth (bytes the kernel must
// read + write) over a device-to-device cudaMemcpy of the same input timed in the same run, and, for
// the selections, the time over one read of the input (a read-only reduction kernel) and over a full
// cub::DeviceRadixSort of the |x| bits. Input: normal(0, 1) from Philox; "narrow" top-k input: every
// value within [1, 1 + 2^-10) (one top-digit bucket: the radix select's worst case).
//   gradcomp_cuda_bench [--sizes 16777216,67108864] [--reps 20] [--csv out.csv]
#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/cuda_codec_api_timing.h"
#include "kernels/cuda/block_scale_kernels.cuh"
#include "kernels/cuda/cast_kernels.cuh"
#include "kernels/cuda/level_kernels.cuh"
#include "kernels/cuda/sparse_kernels.cuh"
#include "kernels/scalar/philox.h"

namespace {

#define CHECK(call)                                                                              \
  do {                                                                                           \
    const cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)

using gradcomp::scalar::RngStream;

__global__ void fillNormal(float* x, size_t n, RngStream rng) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float u1 = (static_cast<float>(rng.word(2 * i) >> 8) + 1.0f) * 5.9604644775390625e-8f;
    const float u2 = static_cast<float>(rng.word(2 * i + 1) >> 8) * 5.9604644775390625e-8f;
    x[i] = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
  }
}

__global__ void fillNarrow(float* x, size_t n, RngStream rng) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = 1.0f + static_cast<float>(rng.word(i) >> 19) * 0x1p-23f;  // 1 + [0, 2^13) ulps
}

__global__ void absBitsKernel(const float* x, size_t n, uint32_t* keys) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    keys[i] = __float_as_uint(x[i]) & 0x7fffffffu;
}

// One read of the input: each thread sums its float4s, one atomic per block (the "read once" yardstick).
__global__ void readOnce(const float4* x, size_t n4, float* sink) {
  __shared__ float part[256];
  float s = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 v = x[i];
    s += (v.x + v.y) + (v.z + v.w);
  }
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0;
    for (int j = 0; j < 256; ++j) t += part[j];
    atomicAdd(sink, t);
  }
}

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
  namespace scalar = gradcomp::scalar;
  namespace gcuda = gradcomp::cuda;
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
  if (csv) std::fprintf(csv, "gpu,kernel,floats,ms,gbps,ratio_vs_memcpy,time_vs_read,time_vs_radix_sort\n");
  std::printf("# %s, %d reps (median). ratio: kernel bandwidth (bytes read + written) / D2D memcpy bandwidth;\n"
              "# x read: time / one read of the input; x sort: time / cub::DeviceRadixSort of the |x| bits\n",
              prop.name, reps);
  std::printf("%-34s %11s %9s %8s %7s %7s %7s\n", "kernel", "floats", "ms", "GB/s", "ratio", "x read", "x sort");
  const RngStream rng = RngStream::make(1, 0, 0, 0);
  for (size_t n : sizes) {
    float *x, *narrow, *y, *residual, *scales, *sink;
    void *codes, *wire;
    uint8_t* codeBytes;
    uint32_t *keys, *sortedKeys;
    unsigned long long *sat, *bad;
    CHECK(cudaMalloc(&x, n * 4));
    CHECK(cudaMalloc(&narrow, n * 4));
    CHECK(cudaMalloc(&y, n * 4));
    CHECK(cudaMalloc(&residual, n * 4));
    CHECK(cudaMalloc(&codes, n * 2 + 64));
    CHECK(cudaMalloc(&codeBytes, n));
    CHECK(cudaMalloc(&wire, n * 2 + 1024));  // sparse entries: up to 1 % x 12 bytes, random-k values
    CHECK(cudaMalloc(&scales, (n / 32 + 1) * 8));
    CHECK(cudaMalloc(&keys, n * 4));
    CHECK(cudaMalloc(&sortedKeys, n * 4));
    CHECK(cudaMalloc(&sink, 4));
    CHECK(cudaMalloc(&sat, 8));
    CHECK(cudaMalloc(&bad, 8));
    fillNormal<<<4096, 256>>>(x, n, rng);
    fillNarrow<<<4096, 256>>>(narrow, n, rng);
    CHECK(cudaGetLastError());
    CHECK(cudaMemset(y, 0, n * 4));
    CHECK(cudaMemset(residual, 0, n * 4));
    CHECK(cudaDeviceSynchronize());
    const double memcpyMs = medianMs(reps, [&] { CHECK(cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice)); });
    const double memcpyGbps = 2.0 * n * 4 / (memcpyMs * 1e-3) / 1e9;
    const double readMs = medianMs(reps, [&] { readOnce<<<4096, 256>>>(reinterpret_cast<const float4*>(x), n / 4, sink); });
    size_t sortBytes = 0;
    CHECK(cub::DeviceRadixSort::SortKeys(nullptr, sortBytes, keys, sortedKeys, static_cast<int64_t>(n)));
    void* sortTemp;
    CHECK(cudaMalloc(&sortTemp, sortBytes));
    const double sortMs = medianMs(reps, [&] {
      absBitsKernel<<<4096, 256>>>(x, n, keys);
      CHECK(cub::DeviceRadixSort::SortKeys(sortTemp, sortBytes, keys, sortedKeys, static_cast<int64_t>(n)));
    });
    struct Case {
      std::string name;
      double bytes;  // read + written (0: a selection, judged by time only)
      std::function<void()> run;
    };
    const auto i8 = static_cast<int8_t*>(codes);
    const auto u8 = static_cast<uint8_t*>(codes);
    const double f = static_cast<double>(n);
    using CastFormat = gcuda::CastFormat;
    using LevelCodec = gcuda::LevelCodec;
    std::vector<Case> cases = {
        {"memcpy D2D", 8 * f, [&] { CHECK(cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice)); }},
        {"read once (reduction)", 4 * f, [&] { readOnce<<<4096, 256>>>(reinterpret_cast<const float4*>(x), n / 4, sink); }},
    };
    for (auto fmt : {CastFormat::Fp16, CastFormat::Bf16}) {
      const std::string name = fmt == CastFormat::Fp16 ? "fp16" : "bf16";
      cases.push_back({name + " encode", 6 * f, [=] { CHECK(gcuda::launchEncodeCast(fmt, x, nullptr, n, 1.0f, codes, nullptr, sat, bad, nullptr)); }});
      cases.push_back({name + " encode + ef", 14 * f, [=] { CHECK(gcuda::launchEncodeCast(fmt, x, residual, n, 1.0f, codes, residual, sat, bad, nullptr)); }});
      cases.push_back({name + " decode-accumulate", 10 * f, [=] { CHECK(gcuda::launchDecodeCast(fmt, codes, n, 1.0f, y, true, nullptr)); }});
    }
    for (auto fmt : {scalar::Fp8Format::E4M3, scalar::Fp8Format::E5M2}) {
      const std::string name = fmt == scalar::Fp8Format::E4M3 ? "fp8-e4m3" : "fp8-e5m2";
      const double sc = 4.0 / 128;
      cases.push_back({name + " encode (block 128)", (5 + sc) * f, [=] { CHECK(gcuda::launchEncodeFp8Blocks(x, nullptr, n, 128, fmt, u8, scales, sat, nullptr, bad, nullptr)); }});
      cases.push_back({name + " encode + ef", (13 + sc) * f, [=] { CHECK(gcuda::launchEncodeFp8Blocks(x, residual, n, 128, fmt, u8, scales, sat, residual, bad, nullptr)); }});
      cases.push_back({name + " decode-accumulate", (9 + sc) * f, [=] { CHECK(gcuda::launchDecodeFp8Blocks(u8, n, 128, fmt, scales, y, true, nullptr)); }});
    }
    const double sc256 = 4.0 / 256, sc1024 = 4.0 / 1024;
    cases.push_back({"int8 encode (block 256)", (5 + sc256) * f, [=] { CHECK(gcuda::launchEncodeInt8Blocks(x, nullptr, n, 256, false, rng, 0, i8, scales, nullptr, bad, nullptr)); }});
    cases.push_back({"int8 encode + ef", (13 + sc256) * f, [=] { CHECK(gcuda::launchEncodeInt8Blocks(x, residual, n, 256, false, rng, 0, i8, scales, residual, bad, nullptr)); }});
    cases.push_back({"int8 stochastic encode", (5 + sc256) * f, [=] { CHECK(gcuda::launchEncodeInt8Blocks(x, nullptr, n, 256, true, rng, 0, i8, scales, nullptr, bad, nullptr)); }});
    cases.push_back({"int8 decode-accumulate", (9 + sc256) * f, [=] { CHECK(gcuda::launchDecodeInt8Blocks(i8, n, 256, scales, y, true, nullptr)); }});
    cases.push_back({"sign encode (block 1024)", (4.125 + sc1024) * f, [=] { CHECK(gcuda::launchEncodeSignBlocks(x, nullptr, n, 1024, u8, scales, nullptr, bad, nullptr)); }});
    cases.push_back({"sign encode + ef", (12.125 + sc1024) * f, [=] { CHECK(gcuda::launchEncodeSignBlocks(x, residual, n, 1024, u8, scales, residual, bad, nullptr)); }});
    cases.push_back({"sign decode-accumulate", (8.125 + sc1024) * f, [=] { CHECK(gcuda::launchDecodeSignBlocks(u8, n, 1024, scales, y, true, nullptr)); }});
    struct Level {
      const char* name;
      LevelCodec codec;
      int bits;
      size_t block;
    };
    for (const Level lv : {Level{"qsgd 4-bit", LevelCodec::Qsgd, 4, 512}, Level{"terngrad", LevelCodec::TernGrad, 2, 512},
                           Level{"onebit", LevelCodec::OneBit, 1, 1024}}) {
      const double out = lv.bits / 8.0;
      cases.push_back({std::string(lv.name) + " encode", (4 + out) * f, [=] {
                         CHECK(gcuda::launchLevelBlockStats(lv.codec, lv.bits, x, nullptr, n, lv.block, scales, nullptr));
                         CHECK(gcuda::launchLevelCodes(lv.codec, lv.bits, rng, x, nullptr, n, lv.block, scales, codeBytes, nullptr, bad, nullptr));
                         CHECK(gcuda::launchPackCodes(codeBytes, n, lv.bits, static_cast<uint32_t*>(codes), nullptr));
                       }});
      cases.push_back({std::string(lv.name) + " decode-accumulate", (8 + out) * f, [=] {
                         CHECK(gcuda::launchDecodeLevels(lv.codec, lv.bits, u8, n, lv.block, scales, y, true, nullptr));
                       }});
    }
    for (double ratio : {0.001, 0.01}) {
      const size_t k = static_cast<size_t>(ratio * f);
      gcuda::SparseOutput out;
      out.indices = wire;
      out.values = static_cast<char*>(wire) + ((k * 4 + 15) / 16) * 16;
      char label[64];
      std::snprintf(label, sizeof label, "top-k %.1f %% exact (normal)", ratio * 100);
      cases.push_back({label, 0, [=] { uint64_t b; CHECK(gcuda::exactTopK(x, n, k, out, &b, nullptr)); }});
      std::snprintf(label, sizeof label, "top-k %.1f %% exact (narrow)", ratio * 100);
      cases.push_back({label, 0, [=] { uint64_t b; CHECK(gcuda::exactTopK(narrow, n, k, out, &b, nullptr)); }});
      std::snprintf(label, sizeof label, "threshold %.1f %% (normal)", ratio * 100);
      cases.push_back({label, 0, [=] {
                         uint64_t count, b;
                         bool overflow;
                         const size_t cap = 2 * k + 64;
                         CHECK(gcuda::thresholdSelect(x, n, k, size_t{1} << 17, 12345, cap,
                                                     [&](uint64_t) { return out; }, &count, &overflow, &b, nullptr));
                       }});
    }
    {
      const size_t k = n / 100;
      const auto perm = scalar::FeistelPermutation::make(n, 1, 0, 0);
      cases.push_back({"random-k 1 % gather", 8.0 * k, [=] { CHECK(gcuda::launchRandomKGather(x, perm, k, wire, false, 1.0f, nullptr, nullptr, nullptr)); }});
    }
    for (const auto& c : cases) {
      const double ms = medianMs(reps, c.run);
      const double gbps = c.bytes / (ms * 1e-3) / 1e9;
      const double ratio = c.bytes ? gbps / memcpyGbps : 0;
      std::printf("%-34s %11zu %9.3f %8.1f %7.2f %7.2f %7.2f\n", c.name.c_str(), n, ms, gbps, ratio, ms / readMs,
                  ms / sortMs);
      if (csv)
        std::fprintf(csv, "%s,%s,%zu,%.4f,%.2f,%.3f,%.3f,%.3f\n", prop.name, c.name.c_str(), n, ms, gbps, ratio,
                     ms / readMs, ms / sortMs);
    }
    std::printf("%-34s %11zu %9.3f\n", "cub::DeviceRadixSort |x| bits", n, sortMs);
    // Whole codec calls (kernels + header, counters and the stream wait): the per-call overhead a
    // trainer pays on top of the kernel time above.
    for (const auto& t : gradcomp::bench::timeCodecApi(x, n, reps)) {
      std::printf("%-34s %11zu %9.3f %8s %7s %7.2f\n", t.name.c_str(), n, t.ms, "", "", t.ms / readMs);
      if (csv) std::fprintf(csv, "%s,%s,%zu,%.4f,,,%.3f,\n", prop.name, t.name.c_str(), n, t.ms, t.ms / readMs);
    }
    if (csv) std::fprintf(csv, "%s,cub radix sort of |x| bits,%zu,%.4f,,,%.3f,1\n", prop.name, n, sortMs, sortMs / readMs);
    for (void* p : {static_cast<void*>(x), static_cast<void*>(narrow), static_cast<void*>(y),
                    static_cast<void*>(residual), codes, static_cast<void*>(codeBytes), wire,
                    static_cast<void*>(scales), static_cast<void*>(keys), static_cast<void*>(sortedKeys), sortTemp,
                    static_cast<void*>(sink), static_cast<void*>(sat), static_cast<void*>(bad)})
      cudaFree(p);
  }
  // A measurement for the notes, not a requirement: the encoders convert with the shared scalar
  // floatToFp8; would cuda_fp8.h's saturating hardware conversion give the same byte on every finite
  // fp32 input? (Zero mismatches would let the kernels use it.)
  unsigned long long* mismatches;
  CHECK(cudaMalloc(&mismatches, 8));
  for (auto fmt : {scalar::Fp8Format::E4M3, scalar::Fp8Format::E5M2}) {
    CHECK(cudaMemset(mismatches, 0, 8));
    CHECK(gcuda::launchCountFp8IntrinsicMismatches(fmt, mismatches, nullptr));
    unsigned long long count = 0;
    CHECK(cudaMemcpy(&count, mismatches, 8, cudaMemcpyDeviceToHost));
    std::printf("# fp8 %s: __nv_cvt_float_to_fp8(__NV_SATFINITE) differs from the reference on %llu of 2^32 - 2^24 "
                "finite inputs\n", fmt == scalar::Fp8Format::E4M3 ? "e4m3" : "e5m2", count);
  }
  cudaFree(mismatches);
  if (csv) std::fclose(csv);
  return 0;
}
