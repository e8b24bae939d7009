#include "benchmarks/cuda_codec_api_timing.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include "compressors/registry.h"

namespace gradcomp::bench {
namespace {

double medianMs(int reps, const std::function<void()>& call) {
  call();  // warm-up (the stream-ordered pool grows once)
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    call();  // every codec call waits for its stream before returning
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

std::vector<ApiTiming> timeCodecApi(const float* x, size_t n, int reps) {
  ExecContext gpu;
  gpu.device = Device::Cuda;
  std::vector<ApiTiming> out;
  float *residual = nullptr, *y = nullptr;
  std::byte* wire = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&residual), n * sizeof(float));
  cudaMalloc(reinterpret_cast<void**>(&y), n * sizeof(float));
  cudaMemset(residual, 0, n * sizeof(float));
  for (const char* spec : {"fp16", "int8", "fp8-e4m3", "sign", "topk:ratio=0.01", "threshold:ratio=0.01"}) {
    auto codec = makeCompressor(spec);
    const size_t bytes = codec->maxEncodedBytes(n);
    cudaMalloc(reinterpret_cast<void**>(&wire), bytes);
    const std::span<const float> in(x, n);
    const std::span<std::byte> w(wire, bytes);
    size_t used = 0;
    out.push_back({std::string(spec) + " encode (codec API)",
                   medianMs(reps, [&] { used = codec->encode(in, w, {}, gpu).wireBytes; })});
    out.push_back({std::string(spec) + " encode + ef (codec API)", medianMs(reps, [&] {
                     codec->encodeWithResidual(in, {residual, n}, {residual, n}, w, {}, gpu);
                   })});
    codec->encode(in, w, {}, gpu);
    out.push_back({std::string(spec) + " decode-accumulate (codec API)", medianMs(reps, [&] {
                     codec->decode(w.first(used), {y, n}, DecodeMode::Accumulate, gpu);
                   })});
    cudaFree(wire);
  }
  cudaFree(residual);
  cudaFree(y);
  return out;
}

}  // namespace gradcomp::bench
