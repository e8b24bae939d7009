// CUDA twins of the block-scaled int8 / FP8 and scaled-sign kernels; see block_scale_kernels.cuh.
// Every floating-point step is the CPU reference's, rounded the same way (__fmul_rn, __fdiv_rn, rintf,
// double lane sums in a fixed order) and compiled with --fmad=false, so the bytes match.
#include <cuda_fp8.h>

#include <cfloat>

#include "kernels/cuda/block_scale_kernels.cuh"
#include "kernels/cuda/device_util.cuh"

namespace gradcomp::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ float blockScaleDevice(float amax, float maxCode) {
  if (!(amax > 0.0f) || !isfinite(amax)) return 1.0f;
  const float s = __fdiv_rn(maxCode, amax);
  return isinf(s) ? FLT_MAX : s;
}

using detail::addend;

// Max of |c| bits over the block, c = g + e (an order-free integer max, so exact), broadcast to every
// thread. A NaN/Inf makes it >= 0x7f800000; the quantizing loop then records where.
__device__ float blockAmaxDevice(const float* g, const float* e, size_t len) {
  __shared__ uint32_t warpMax[kWarps];
  uint32_t m = 0;
  for (size_t i = threadIdx.x; i < len; i += kThreads) m = max(m, scalar::absBits(addend(g, e, i)));
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0) warpMax[threadIdx.x >> 5] = m;
  __syncthreads();
  uint32_t all = 0;
  for (int w = 0; w < kWarps; ++w) all = max(all, warpMax[w]);
  __syncthreads();  // warpMax is reused by the next call
  return scalar::bitsToFloat(all);
}

__global__ void encodeInt8Kernel(const float* x, const float* e, size_t n, size_t blockSize, bool stochastic,
                                 scalar::RngStream rng, uint64_t first, int8_t* codes, float* scales, float* residual,
                                 unsigned long long* firstBad) {
  const size_t b0 = blockIdx.x * blockSize, len = min(blockSize, n - b0);
  const float scale = blockScaleDevice(blockAmaxDevice(x + b0, e ? e + b0 : nullptr, len), 127.0f);
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  const float inv = __fdiv_rn(1.0f, scale);
  for (size_t i = threadIdx.x; i < len; i += kThreads) {
    const float v = addend(x, e, b0 + i);
    if (!scalar::isFiniteBits(scalar::absBits(v))) detail::recordFirst(firstBad, b0 + i);
    const float scaled = __fmul_rn(v, scale);
    float q = stochastic ? floorf(__fadd_rn(scaled, scalar::uniform01(rng.word(first + b0 + i)))) : rintf(scaled);
    q = fminf(fmaxf(q, -127.0f), 127.0f);
    const int8_t c = static_cast<int8_t>(q);
    codes[b0 + i] = c;
    if (residual) residual[b0 + i] = __fsub_rn(v, __fmul_rn(static_cast<float>(c), inv));
  }
}

__global__ void decodeInt8Kernel(const int8_t* codes, size_t n, size_t blockSize, const float* scales, float* out,
                                 bool accumulate) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float inv = __fdiv_rn(1.0f, scales[i / blockSize]);
  const float v = __fmul_rn(static_cast<float>(codes[i]), inv);
  out[i] = accumulate ? __fadd_rn(out[i], v) : v;
}

__global__ void encodeFp8Kernel(const float* x, const float* e, size_t n, size_t blockSize, scalar::Fp8Format fmt,
                                uint8_t* codes, float* scales, unsigned long long* saturated, float* residual,
                                unsigned long long* firstBad) {
  const scalar::Fp8Spec s = scalar::fp8Spec(fmt);
  const uint32_t overflowBits = scalar::floatBits(s.maxValue) + (1u << (22 - s.mantBits));
  const size_t b0 = blockIdx.x * blockSize, len = min(blockSize, n - b0);
  const float scale = blockScaleDevice(blockAmaxDevice(x + b0, e ? e + b0 : nullptr, len), s.maxValue);
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  const float inv = __fdiv_rn(1.0f, scale);
  unsigned count = 0;
  for (size_t i = threadIdx.x; i < len; i += kThreads) {
    const float v = addend(x, e, b0 + i);
    if (!scalar::isFiniteBits(scalar::absBits(v))) detail::recordFirst(firstBad, b0 + i);
    const float scaled = __fmul_rn(v, scale);
    count += scalar::absBits(scaled) >= overflowBits;
    const uint8_t c = scalar::floatToFp8(scaled, fmt);
    codes[b0 + i] = c;
    if (residual) residual[b0 + i] = __fsub_rn(v, __fmul_rn(scalar::fp8ToFloat(c, fmt), inv));
  }
  count = __reduce_add_sync(0xffffffffu, count);
  if ((threadIdx.x & 31) == 0 && count && saturated) atomicAdd(saturated, static_cast<unsigned long long>(count));
}

__global__ void decodeFp8Kernel(const uint8_t* codes, size_t n, size_t blockSize, scalar::Fp8Format fmt,
                                const float* scales, float* out, bool accumulate) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float inv = __fdiv_rn(1.0f, scales[i / blockSize]);
  const float v = __fmul_rn(scalar::fp8ToFloat(codes[i], fmt), inv);
  out[i] = accumulate ? __fadd_rn(out[i], v) : v;
}

__global__ void encodeSignKernel(const float* x, const float* e, size_t n, size_t blockSize, uint8_t* bits,
                                 float* scales, float* residual, unsigned long long* firstBad) {
  __shared__ double lanes[8];
  __shared__ float blockScale;
  const size_t b0 = blockIdx.x * blockSize, len = min(blockSize, n - b0);
  // mean |x|: lane j sums the elements i % 8 == j in order, in double; then the CPU's fixed tree.
  if (threadIdx.x < 8) {
    double sum = 0;
    for (size_t i = threadIdx.x; i < len; i += 8)
      sum = __dadd_rn(sum, static_cast<double>(fabsf(addend(x, e, b0 + i))));
    lanes[threadIdx.x] = sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const double total = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    blockScale = len ? static_cast<float>(total / static_cast<double>(len)) : 0.0f;
    scales[blockIdx.x] = blockScale;
  }
  __syncthreads();
  const float scale = blockScale;
  const size_t bytesTotal = (n + 7) / 8;
  for (size_t base = 0; base < len; base += kThreads) {
    const size_t i = base + threadIdx.x;
    bool bit = false;
    if (i < len) {
      const float v = addend(x, e, b0 + i);
      if (!scalar::isFiniteBits(scalar::absBits(v))) detail::recordFirst(firstBad, b0 + i);
      bit = v > 0.0f || (v == 0.0f && ((b0 + i) & 1u) == 0);
      if (residual) residual[b0 + i] = __fsub_rn(v, bit ? scale + 0.0f : -scale + 0.0f);
    }
    const unsigned word = __ballot_sync(0xffffffffu, bit);
    const size_t warpFirst = b0 + base + (threadIdx.x & ~31u);  // a multiple of 32: blockSize is
    if ((threadIdx.x & 31) == 0 && warpFirst < b0 + len) {
      const size_t byte0 = warpFirst / 8;
      for (int k = 0; k < 4 && byte0 + k < bytesTotal; ++k) bits[byte0 + k] = static_cast<uint8_t>(word >> (8 * k));
    }
  }
}

__global__ void decodeSignKernel(const uint8_t* bits, size_t n, size_t blockSize, const float* scales, float* out,
                                 bool accumulate) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float scale = scales[i / blockSize];
  const float v = (((bits[i >> 3] >> (i & 7)) & 1u) ? scale : -scale) + 0.0f;
  out[i] = accumulate ? __fadd_rn(out[i], v) : v;
}

// Every finite fp32 bit pattern through both conversions; counts where they differ.
__global__ void fp8IntrinsicMismatchKernel(scalar::Fp8Format fmt, unsigned long long* mismatches) {
  const __nv_fp8_interpretation_t kind = fmt == scalar::Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
  unsigned count = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t b = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < (uint64_t{1} << 32); b += stride) {
    const float f = scalar::bitsToFloat(static_cast<uint32_t>(b));
    if (!isfinite(f)) continue;
    count += scalar::floatToFp8(f, fmt) != static_cast<uint8_t>(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, kind));
  }
  count = __reduce_add_sync(0xffffffffu, count);
  if ((threadIdx.x & 31) == 0 && count) atomicAdd(mismatches, static_cast<unsigned long long>(count));
}

unsigned blocksOf(size_t n, size_t blockSize) { return static_cast<unsigned>((n + blockSize - 1) / blockSize); }
unsigned elementGrid(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t launchEncodeInt8Blocks(const float* x, const float* e, size_t n, size_t blockSize, bool stochastic,
                                   scalar::RngStream rng, uint64_t first, int8_t* codes, float* scales, float* residual,
                                   unsigned long long* firstBad, cudaStream_t cudaStream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  encodeInt8Kernel<<<blocksOf(n, blockSize), kThreads, 0, cudaStream>>>(x, e, n, blockSize, stochastic, rng, first,
                                                                         codes, scales, residual, firstBad);
  return cudaGetLastError();
}

cudaError_t launchDecodeInt8Blocks(const int8_t* codes, size_t n, size_t blockSize, const float* scales, float* out,
                                   bool accumulate, cudaStream_t cudaStream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  decodeInt8Kernel<<<elementGrid(n), kThreads, 0, cudaStream>>>(codes, n, blockSize, scales, out, accumulate);
  return cudaGetLastError();
}

cudaError_t launchEncodeFp8Blocks(const float* x, const float* e, size_t n, size_t blockSize, scalar::Fp8Format fmt,
                                  uint8_t* codes, float* scales, unsigned long long* saturated, float* residual,
                                  unsigned long long* firstBad, cudaStream_t cudaStream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  encodeFp8Kernel<<<blocksOf(n, blockSize), kThreads, 0, cudaStream>>>(x, e, n, blockSize, fmt, codes, scales,
                                                                        saturated, residual, firstBad);
  return cudaGetLastError();
}

cudaError_t launchDecodeFp8Blocks(const uint8_t* codes, size_t n, size_t blockSize, scalar::Fp8Format fmt,
                                  const float* scales, float* out, bool accumulate, cudaStream_t cudaStream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  decodeFp8Kernel<<<elementGrid(n), kThreads, 0, cudaStream>>>(codes, n, blockSize, fmt, scales, out, accumulate);
  return cudaGetLastError();
}

cudaError_t launchEncodeSignBlocks(const float* x, const float* e, size_t n, size_t blockSize, uint8_t* bits,
                                   float* scales, float* residual, unsigned long long* firstBad,
                                   cudaStream_t cudaStream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0 || blockSize % 32 != 0) return cudaErrorInvalidValue;
  encodeSignKernel<<<blocksOf(n, blockSize), kThreads, 0, cudaStream>>>(x, e, n, blockSize, bits, scales, residual,
                                                                         firstBad);
  return cudaGetLastError();
}

cudaError_t launchDecodeSignBlocks(const uint8_t* bits, size_t n, size_t blockSize, const float* scales, float* out,
                                   bool accumulate, cudaStream_t cudaStream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  decodeSignKernel<<<elementGrid(n), kThreads, 0, cudaStream>>>(bits, n, blockSize, scales, out, accumulate);
  return cudaGetLastError();
}

cudaError_t launchCountFp8IntrinsicMismatches(scalar::Fp8Format fmt, unsigned long long* mismatches,
                                              cudaStream_t cudaStream) {
  fp8IntrinsicMismatchKernel<<<4096, kThreads, 0, cudaStream>>>(fmt, mismatches);
  return cudaGetLastError();
}

}  // namespace gradcomp::cuda
