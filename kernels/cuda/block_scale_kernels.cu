// CUDA twins of the block-scaled int8 / FP8 and scaled-sign kernels; see block_scale_kernels.cuh.
// Every floating-point step is the CPU reference's, rounded the same way (__fmul_rn, __fdiv_rn, rintf,
// double lane sums in a fixed order) and compiled with --fmad=false, so the bytes match.
#include <cuda_fp8.h>

#include <cfloat>
#include <initializer_list>

#include "kernels/cuda/block_scale_kernels.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/scalar/level_codes.h"
#include "kernels/scalar/scale_limits.h"

namespace gradcomp::cuda {
namespace {

constexpr int kThreads = 256;

using detail::addend;

// One warp per codec block: no shared memory and no block-wide barrier, eight codec blocks per CUDA
// block in flight, and every loop strided by the warp so loads and stores coalesce. Lane l handles the
// block's elements l, l+32, ... in both the amax pass and the quantizing pass, so with the residual
// written in place over e each lane only overwrites what it alone has read.
struct WarpBlock {
  size_t index;  // codec block
  size_t b0, len;
  unsigned lane;
  bool valid;
};

__device__ __forceinline__ WarpBlock warpBlock(size_t n, size_t blockSize) {
  WarpBlock w;
  w.index = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  w.lane = threadIdx.x & 31;
  w.b0 = w.index * blockSize;
  w.valid = w.b0 < n;
  w.len = w.valid ? min(blockSize, n - w.b0) : 0;
  return w;
}

// Walks a warp's block in runs: with `vec` (every pointer 16-byte aligned, codes 4-byte aligned, the
// block size a multiple of 4, so each block starts aligned too), lane l takes elements 4l..4l+3 of
// each 128-element chunk as one 16-byte load and store; the block's last len % 4 elements, and every
// element without `vec`, go one at a time. fn(i, count) with count 4 or 1. The per-element math is
// the same either way, so alignment never changes a byte.
template <typename Fn>
__device__ __forceinline__ void forWarpRuns(const WarpBlock& w, bool vec, Fn&& fn) {
  size_t k0 = 0;
  if (vec) {
    k0 = w.len & ~size_t{3};
    for (size_t k = 4 * size_t{w.lane}; k < k0; k += 128) fn(w.b0 + k, 4);
  }
  for (size_t k = k0 + w.lane; k < w.len; k += 32) fn(w.b0 + k, 1);
}

// c[j] = x[i + j] (+ e[i + j]) for j < count (a 16-byte load when count is 4).
__device__ __forceinline__ void loadRun(const float* x, const float* e, size_t i, int count, float (&c)[4]) {
  if (count == 4)
    detail::addend4(x, e, i, c);
  else
    c[0] = addend(x, e, i);
}

// Stores a run of byte codes and, optionally, residuals (one 4-byte and one 16-byte store for 4).
__device__ __forceinline__ void storeRun(uint8_t* codes, float* residual, size_t i, int count, const uint8_t (&q)[4],
                                         const float (&r)[4]) {
  if (count == 4) {
    *reinterpret_cast<uint32_t*>(codes + i) = q[0] | (q[1] << 8) | (q[2] << 16) | (uint32_t{q[3]} << 24);
    if (residual) *reinterpret_cast<float4*>(residual + i) = make_float4(r[0], r[1], r[2], r[3]);
  } else {
    codes[i] = q[0];
    if (residual) residual[i] = r[0];
  }
}

// Max of |c| bits over the block (an order-free integer max, so exact), in every lane. A NaN/Inf makes
// it >= 0x7f800000; the quantizing loop then records where.
__device__ __forceinline__ float warpAmax(const float* g, const float* e, const WarpBlock& w, bool vec) {
  uint32_t m = 0;
  forWarpRuns(w, vec, [&](size_t i, int count) {
    float c[4];
    loadRun(g, e, i, count, c);
    for (int j = 0; j < count; ++j) m = max(m, scalar::absBits(c[j]));
  });
  return scalar::bitsToFloat(__reduce_max_sync(0xffffffffu, m));
}

__global__ void encodeInt8Kernel(const float* x, const float* e, size_t n, size_t blockSize, bool stochastic,
                                 scalar::RngStream rng, uint64_t first, int8_t* codes, float* scales, float* residual,
                                 unsigned long long* firstBad, bool vec) {
  const WarpBlock w = warpBlock(n, blockSize);
  if (!w.valid) return;  // whole warps leave together
  const float scale = scalar::blockScaleFor(warpAmax(x, e, w, vec), 127.0f);
  if (w.lane == 0) scales[w.index] = scale;
  const float inv = __fdiv_rn(1.0f, scale);
  forWarpRuns(w, vec, [&](size_t i, int count) {
    float c[4], r[4];
    uint8_t q[4];
    loadRun(x, e, i, count, c);
    for (int j = 0; j < count; ++j) {
      const float v = c[j];
      if (!scalar::isFiniteBits(scalar::absBits(v))) detail::recordFirst(firstBad, i + j);
      const float scaled = __fmul_rn(v, scale);
      float level = stochastic ? floorf(__fadd_rn(scaled, scalar::roundingUniform(rng, first + i + j))) : rintf(scaled);
      level = fminf(fmaxf(level, -127.0f), 127.0f);
      const int8_t code = static_cast<int8_t>(level);
      q[j] = static_cast<uint8_t>(code);
      r[j] = __fsub_rn(v, __fmul_rn(static_cast<float>(code), inv));
    }
    storeRun(reinterpret_cast<uint8_t*>(codes), residual, i, count, q, r);
  });
}

// Decoders: also one warp per codec block, so the block's scale (and its reciprocal) is looked up once
// per block rather than through a 64-bit division per element. With `vec`, 4 codes and 4 outputs per
// lane move as one 4-byte and one 16-byte access.
template <typename DecodeOne>
__device__ __forceinline__ void decodeRuns(const uint8_t* codes, float* out, bool accumulate, const WarpBlock& w,
                                           bool vec, DecodeOne&& decodeOne) {
  forWarpRuns(w, vec, [&](size_t i, int count) {
    if (count == 4) {
      const uint32_t q = *reinterpret_cast<const uint32_t*>(codes + i);
      float4 v = make_float4(decodeOne(q & 0xffu), decodeOne((q >> 8) & 0xffu), decodeOne((q >> 16) & 0xffu),
                             decodeOne(q >> 24));
      if (accumulate) {
        const float4 o = *reinterpret_cast<const float4*>(out + i);
        v = make_float4(__fadd_rn(o.x, v.x), __fadd_rn(o.y, v.y), __fadd_rn(o.z, v.z), __fadd_rn(o.w, v.w));
      }
      *reinterpret_cast<float4*>(out + i) = v;
    } else {
      const float v = decodeOne(codes[i]);
      out[i] = accumulate ? __fadd_rn(out[i], v) : v;
    }
  });
}

__global__ void decodeInt8Kernel(const int8_t* codes, size_t n, size_t blockSize, const float* scales, float* out,
                                 bool accumulate, bool vec) {
  const WarpBlock w = warpBlock(n, blockSize);
  if (!w.valid) return;
  const float inv = __fdiv_rn(1.0f, scales[w.index]);
  decodeRuns(reinterpret_cast<const uint8_t*>(codes), out, accumulate, w, vec, [inv](uint32_t q) {
    return __fmul_rn(static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(q))), inv);
  });
}

__global__ void encodeFp8Kernel(const float* x, const float* e, size_t n, size_t blockSize, scalar::Fp8Format fmt,
                                uint8_t* codes, float* scales, unsigned long long* saturated, float* residual,
                                unsigned long long* firstBad, bool vec) {
  const WarpBlock w = warpBlock(n, blockSize);
  if (!w.valid) return;
  const scalar::Fp8Spec s = scalar::fp8Spec(fmt);
  const uint32_t overflowBits = scalar::floatBits(s.maxValue) + (1u << (22 - s.mantBits));
  const float scale = scalar::blockScaleFor(warpAmax(x, e, w, vec), s.maxValue);
  if (w.lane == 0) scales[w.index] = scale;
  const float inv = __fdiv_rn(1.0f, scale);
  unsigned count = 0;
  forWarpRuns(w, vec, [&](size_t i, int runLength) {
    float c[4], r[4];
    uint8_t q[4];
    loadRun(x, e, i, runLength, c);
    for (int j = 0; j < runLength; ++j) {
      const float v = c[j];
      if (!scalar::isFiniteBits(scalar::absBits(v))) detail::recordFirst(firstBad, i + j);
      const float scaled = __fmul_rn(v, scale);
      count += scalar::absBits(scaled) >= overflowBits;
      q[j] = scalar::floatToFp8(scaled, fmt);
      r[j] = __fsub_rn(v, __fmul_rn(scalar::fp8ToFloat(q[j], fmt), inv));
    }
    storeRun(codes, residual, i, runLength, q, r);
  });
  count = __reduce_add_sync(0xffffffffu, count);
  if (w.lane == 0 && count && saturated) atomicAdd(saturated, static_cast<unsigned long long>(count));
}

__global__ void decodeFp8Kernel(const uint8_t* codes, size_t n, size_t blockSize, scalar::Fp8Format fmt,
                                const float* scales, float* out, bool accumulate, bool vec) {
  const WarpBlock w = warpBlock(n, blockSize);
  if (!w.valid) return;
  const float inv = __fdiv_rn(1.0f, scales[w.index]);
  decodeRuns(codes, out, accumulate, w, vec, [inv, fmt](uint32_t q) {
    return __fmul_rn(scalar::fp8ToFloat(static_cast<uint8_t>(q), fmt), inv);
  });
}

__global__ void encodeSignKernel(const float* x, const float* e, size_t n, size_t blockSize, uint8_t* bits,
                                 float* scales, float* residual, unsigned long long* firstBad) {
  const WarpBlock w = warpBlock(n, blockSize);
  if (!w.valid) return;
  // mean |c|: lane j < 8 sums the elements i % 8 == j in order, in double; then the CPU's fixed tree.
  const double mine = w.lane < 8 ? scalar::laneSumAbs(x + w.b0, e ? e + w.b0 : nullptr, w.len, w.lane) : 0.0;
  double lanes[8];
  for (int j = 0; j < 8; ++j) lanes[j] = __shfl_sync(0xffffffffu, mine, j);
  const float scale = scalar::meanOf(scalar::sumOfLanes8(lanes), w.len);
  if (w.lane == 0) scales[w.index] = scale;
  __syncwarp();  // lanes 0-7 have read every c before any lane overwrites e with the residual
  // blockSize is a multiple of 32: each 32-element chunk is one ballot and one aligned 32-bit word.
  const size_t bytesTotal = (n + 7) / 8;
  for (size_t base = 0; base < w.len; base += 32) {
    const size_t k = base + w.lane;
    bool bit = false;
    if (k < w.len) {
      const size_t i = w.b0 + k;
      const float v = addend(x, e, i);
      if (!scalar::isFiniteBits(scalar::absBits(v))) detail::recordFirst(firstBad, i);
      bit = scalar::signCode(v, i);
      if (residual) residual[i] = __fsub_rn(v, scalar::twoValued(bit, scale, -scale));
    }
    const unsigned word = __ballot_sync(0xffffffffu, bit);
    const size_t byte0 = (w.b0 + base) / 8;
    if (w.lane == 0) {
      if (byte0 + 4 <= bytesTotal && detail::isAligned(bits + byte0, 4))  // always, in a wire section
        *reinterpret_cast<uint32_t*>(bits + byte0) = word;
      else
        for (size_t j = 0; byte0 + j < bytesTotal; ++j) bits[byte0 + j] = static_cast<uint8_t>(word >> (8 * j));
    }
  }
}

__global__ void decodeSignKernel(const uint8_t* bits, size_t n, size_t blockSize, const float* scales, float* out,
                                 bool accumulate) {
  const WarpBlock w = warpBlock(n, blockSize);
  if (!w.valid) return;
  const float scale = scales[w.index];
  for (size_t i = w.b0 + w.lane; i < w.b0 + w.len; i += 32) {
    const float v = scalar::twoValued((bits[i >> 3] >> (i & 7)) & 1u, scale, -scale);
    out[i] = accumulate ? __fadd_rn(out[i], v) : v;
  }
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


// Whether the 4-element runs of forWarpRuns may use vector accesses: every float array (null ones
// aside) 16-byte aligned, the codes 4-byte aligned, and blocks starting on multiples of 4 elements.
bool runsAligned(size_t blockSize, std::initializer_list<const float*> floats, const void* codes) {
  if (blockSize % 4 != 0 || reinterpret_cast<uintptr_t>(codes) % 4 != 0) return false;
  for (const float* p : floats)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;  // null is aligned
  return true;
}

}  // namespace

cudaError_t launchEncodeInt8Blocks(const float* x, const float* e, size_t n, size_t blockSize, bool stochastic,
                                   scalar::RngStream rng, uint64_t first, int8_t* codes, float* scales, float* residual,
                                   unsigned long long* firstBad, cudaStream_t cudaStream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  encodeInt8Kernel<<<detail::warpPerBlockGrid(n, blockSize), kThreads, 0, cudaStream>>>(
      x, e, n, blockSize, stochastic, rng, first, codes, scales, residual, firstBad,
      runsAligned(blockSize, {x, e, residual}, codes));
  return cudaGetLastError();
}

cudaError_t launchDecodeInt8Blocks(const int8_t* codes, size_t n, size_t blockSize, const float* scales, float* out,
                                   bool accumulate, cudaStream_t cudaStream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  decodeInt8Kernel<<<detail::warpPerBlockGrid(n, blockSize), kThreads, 0, cudaStream>>>(
      codes, n, blockSize, scales, out, accumulate, runsAligned(blockSize, {out}, codes));
  return cudaGetLastError();
}

cudaError_t launchEncodeFp8Blocks(const float* x, const float* e, size_t n, size_t blockSize, scalar::Fp8Format fmt,
                                  uint8_t* codes, float* scales, unsigned long long* saturated, float* residual,
                                  unsigned long long* firstBad, cudaStream_t cudaStream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  encodeFp8Kernel<<<detail::warpPerBlockGrid(n, blockSize), kThreads, 0, cudaStream>>>(
      x, e, n, blockSize, fmt, codes, scales, saturated, residual, firstBad, runsAligned(blockSize, {x, e, residual}, codes));
  return cudaGetLastError();
}

cudaError_t launchDecodeFp8Blocks(const uint8_t* codes, size_t n, size_t blockSize, scalar::Fp8Format fmt,
                                  const float* scales, float* out, bool accumulate, cudaStream_t cudaStream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  decodeFp8Kernel<<<detail::warpPerBlockGrid(n, blockSize), kThreads, 0, cudaStream>>>(
      codes, n, blockSize, fmt, scales, out, accumulate, runsAligned(blockSize, {out}, codes));
  return cudaGetLastError();
}

cudaError_t launchEncodeSignBlocks(const float* x, const float* e, size_t n, size_t blockSize, uint8_t* bits,
                                   float* scales, float* residual, unsigned long long* firstBad,
                                   cudaStream_t cudaStream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0 || blockSize % 32 != 0) return cudaErrorInvalidValue;
  encodeSignKernel<<<detail::warpPerBlockGrid(n, blockSize), kThreads, 0, cudaStream>>>(x, e, n, blockSize, bits, scales, residual,
                                                                         firstBad);
  return cudaGetLastError();
}

cudaError_t launchDecodeSignBlocks(const uint8_t* bits, size_t n, size_t blockSize, const float* scales, float* out,
                                   bool accumulate, cudaStream_t cudaStream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  decodeSignKernel<<<detail::warpPerBlockGrid(n, blockSize), kThreads, 0, cudaStream>>>(bits, n, blockSize, scales, out, accumulate);
  return cudaGetLastError();
}

cudaError_t launchCountFp8IntrinsicMismatches(scalar::Fp8Format fmt, unsigned long long* mismatches,
                                              cudaStream_t cudaStream) {
  fp8IntrinsicMismatchKernel<<<4096, kThreads, 0, cudaStream>>>(fmt, mismatches);
  return cudaGetLastError();
}

}  // namespace gradcomp::cuda
