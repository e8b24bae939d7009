// CUDA twins of the MX / NVFP4 / int4 block encoders and decoders; see microscaling_kernels.cuh.
// Encoders: one thread per codec block (these blocks are 16-64 elements; the shared scale needs the
// whole block first), each walking its block twice (amax, then codes) exactly as the CPU does.
// Decoders and checks: one thread per element or per block, grid-strided. Every fp32 step is the
// CPU's (the shared scalar functions, __fmul_rn / __fdiv_rn), compiled with --fmad=false.
#include <cfloat>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/microscaling_kernels.cuh"
#include "kernels/scalar/level_codes.h"
#include "kernels/scalar/scale_limits.h"

namespace gradcomp::cuda {
namespace {

using detail::addend;
using detail::kThreads;

__device__ __forceinline__ size_t threadIndex() { return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ size_t threadStride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

// max |c| bits over [b0, b0 + len), and the first non-finite index recorded.
__device__ __forceinline__ float blockAmax(const float* x, const float* e, size_t b0, size_t len,
                                           unsigned long long* firstBad) {
  uint32_t m = 0;
  for (size_t i = 0; i < len; ++i) {
    const uint32_t a = scalar::absBits(addend(x, e, b0 + i));
    if (!scalar::isFiniteBits(a)) detail::recordFirst(firstBad, b0 + i);
    m = max(m, a);
  }
  return scalar::bitsToFloat(m);
}

__global__ void encodeMxKernel(const float* x, const float* e, size_t n, size_t blockSize, scalar::ElementFormat fmt,
                               uint8_t* codes, uint8_t* scaleCodes, float* residual, unsigned long long* saturated,
                               unsigned long long* firstBad) {
  const scalar::ElementSpec s = scalar::elementSpec(fmt);
  const uint32_t overflow = scalar::elementOverflowBits(s);
  const size_t blocks = (n + blockSize - 1) / blockSize;
  unsigned long long count = 0;
  for (size_t b = threadIndex(); b < blocks; b += threadStride()) {
    const size_t b0 = b * blockSize, len = min(blockSize, n - b0);
    const uint8_t scaleCode = scalar::mxSharedScaleCode(blockAmax(x, e, b0, len, firstBad), s);
    scaleCodes[b] = scaleCode;
    const float inv = scalar::mxInverseScale(scaleCode), scale = scalar::e8m0ToFloat(scaleCode);
    for (size_t i = b0; i < b0 + len; ++i) {
      const float c = addend(x, e, i);
      const float v = __fmul_rn(c, inv);
      count += scalar::absBits(v) >= overflow;
      const uint8_t q = scalar::floatToElement(v, s);
      codes[i] = q;
      if (residual) residual[i] = __fsub_rn(c, __fmul_rn(scalar::elementToFloat(q, s, fmt), scale));
    }
  }
  if (count && saturated) atomicAdd(saturated, count);
}

__global__ void decodeMxKernel(const uint8_t* packed, size_t n, size_t blockSize, scalar::ElementFormat fmt,
                               const uint8_t* scaleCodes, float* out, bool accumulate) {
  const scalar::ElementSpec s = scalar::elementSpec(fmt);
  for (size_t i = threadIndex(); i < n; i += threadStride()) {
    const uint8_t q = static_cast<uint8_t>(scalar::unpackedCode(packed, i, s.bits));
    const float v = __fmul_rn(scalar::elementToFloat(q, s, fmt), scalar::e8m0ToFloat(scaleCodes[i / blockSize]));
    out[i] = accumulate ? __fadd_rn(out[i], v) : v;
  }
}

__global__ void findBadMxScalesKernel(const uint8_t* scaleCodes, size_t blocks, scalar::ElementFormat fmt,
                                      unsigned long long* firstBad) {
  const scalar::ElementSpec s = scalar::elementSpec(fmt);
  for (size_t b = threadIndex(); b < blocks; b += threadStride())
    if (!scalar::mxScaleCodeDecodes(scaleCodes[b], s)) detail::recordFirst(firstBad, b);
}

__global__ void absMaxKernel(const float* x, const float* e, size_t n, unsigned* amaxBits) {
  uint32_t m = 0;
  for (size_t i = threadIndex(); i < n; i += threadStride()) m = max(m, scalar::absBits(addend(x, e, i)));
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0 && m) atomicMax(amaxBits, m);
}

__global__ void encodeNvfp4Kernel(const float* x, const float* e, size_t n, size_t blockSize, float t, uint8_t* codes,
                                  uint8_t* scaleCodes, float* residual, unsigned long long* saturated,
                                  unsigned long long* firstBad) {
  const scalar::ElementSpec s = scalar::elementSpec(scalar::ElementFormat::E2M1);
  const uint32_t overflow = scalar::elementOverflowBits(s);
  const size_t blocks = (n + blockSize - 1) / blockSize;
  unsigned long long count = 0;
  for (size_t b = threadIndex(); b < blocks; b += threadStride()) {
    const size_t b0 = b * blockSize, len = min(blockSize, n - b0);
    const uint8_t scaleCode = scalar::nvfp4BlockScaleCode(blockAmax(x, e, b0, len, firstBad), t);
    scaleCodes[b] = scaleCode;
    const float factor = scalar::nvfp4BlockFactor(scaleCode, t);
    for (size_t i = b0; i < b0 + len; ++i) {
      const float c = addend(x, e, i);
      uint8_t q = 0;
      if (factor != 0.0f) {
        const float v = __fdiv_rn(c, factor);
        count += scalar::absBits(v) >= overflow;
        q = scalar::floatToElement(v, s);
      }
      codes[i] = q;
      if (residual)
        residual[i] = __fsub_rn(c, __fmul_rn(scalar::elementToFloat(q, s, scalar::ElementFormat::E2M1), factor));
    }
  }
  if (count && saturated) atomicAdd(saturated, count);
}

__global__ void decodeNvfp4Kernel(const uint8_t* packed, size_t n, size_t blockSize, const uint8_t* scaleCodes, float t,
                                  float* out, bool accumulate) {
  const scalar::ElementSpec s = scalar::elementSpec(scalar::ElementFormat::E2M1);
  for (size_t i = threadIndex(); i < n; i += threadStride()) {
    const uint8_t q = static_cast<uint8_t>(scalar::unpackedCode(packed, i, 4));
    const float v = __fmul_rn(scalar::elementToFloat(q, s, scalar::ElementFormat::E2M1),
                              scalar::nvfp4BlockFactor(scaleCodes[i / blockSize], t));
    out[i] = accumulate ? __fadd_rn(out[i], v) : v;
  }
}

__global__ void findBadNvfp4ScalesKernel(const uint8_t* scaleCodes, size_t blocks, unsigned long long* firstBad) {
  for (size_t b = threadIndex(); b < blocks; b += threadStride())
    if (!scalar::nvfp4ScaleCodeValid(scaleCodes[b])) detail::recordFirst(firstBad, b);
}

__global__ void encodeInt4Kernel(const float* x, const float* e, size_t n, size_t blockSize, bool stochastic,
                                 scalar::RngStream rng, uint8_t* nibbles, float* scales, float* residual,
                                 unsigned long long* firstBad) {
  const size_t blocks = (n + blockSize - 1) / blockSize;
  for (size_t b = threadIndex(); b < blocks; b += threadStride()) {
    const size_t b0 = b * blockSize, len = min(blockSize, n - b0);
    const float scale = scalar::blockScaleFor(blockAmax(x, e, b0, len, firstBad), 7.0f);
    scales[b] = scale;
    const float inv = __fdiv_rn(1.0f, scale);
    for (size_t i = b0; i < b0 + len; ++i) {
      const float c = addend(x, e, i);
      const float scaled = __fmul_rn(c, scale);
      float level = stochastic ? floorf(__fadd_rn(scaled, scalar::roundingUniform(rng, i))) : rintf(scaled);
      level = fminf(fmaxf(level, -7.0f), 7.0f);
      const int code = static_cast<int>(level);
      nibbles[i] = static_cast<uint8_t>(code & 0xf);
      if (residual) residual[i] = __fsub_rn(c, __fmul_rn(static_cast<float>(code), inv));
    }
  }
}

__device__ __forceinline__ int int4Code(const uint8_t* packed, size_t i) {
  const int nibble = static_cast<int>(scalar::unpackedCode(packed, i, 4));
  return nibble >= 8 ? nibble - 16 : nibble;
}

__global__ void decodeInt4Kernel(const uint8_t* packed, size_t n, size_t blockSize, const float* scales, float* out,
                                 bool accumulate) {
  for (size_t i = threadIndex(); i < n; i += threadStride()) {
    const float v = __fmul_rn(static_cast<float>(int4Code(packed, i)), __fdiv_rn(1.0f, scales[i / blockSize]));
    out[i] = accumulate ? __fadd_rn(out[i], v) : v;
  }
}

__global__ void findInt4MinimumKernel(const uint8_t* packed, size_t n, unsigned long long* firstBad) {
  for (size_t i = threadIndex(); i < n; i += threadStride())
    if (int4Code(packed, i) == -8) detail::recordFirst(firstBad, i);
}

size_t blocksOf(size_t n, size_t blockSize) { return (n + blockSize - 1) / blockSize; }

}  // namespace

cudaError_t launchEncodeMxBlocks(const float* x, const float* e, size_t n, size_t blockSize, scalar::ElementFormat fmt,
                                 uint8_t* codes, uint8_t* scaleCodes, float* residual, unsigned long long* saturated,
                                 unsigned long long* firstBad, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  encodeMxKernel<<<detail::gridFor(blocksOf(n, blockSize)), kThreads, 0, stream>>>(x, e, n, blockSize, fmt, codes,
                                                                                  scaleCodes, residual, saturated, firstBad);
  return cudaGetLastError();
}

cudaError_t launchDecodeMx(const uint8_t* packed, size_t n, size_t blockSize, scalar::ElementFormat fmt,
                           const uint8_t* scaleCodes, float* out, bool accumulate, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  decodeMxKernel<<<detail::gridFor(n), kThreads, 0, stream>>>(packed, n, blockSize, fmt, scaleCodes, out, accumulate);
  return cudaGetLastError();
}

cudaError_t launchFindBadMxScales(const uint8_t* scaleCodes, size_t blocks, scalar::ElementFormat fmt,
                                  unsigned long long* firstBad, cudaStream_t stream) {
  if (blocks == 0) return cudaSuccess;
  findBadMxScalesKernel<<<detail::gridFor(blocks), kThreads, 0, stream>>>(scaleCodes, blocks, fmt, firstBad);
  return cudaGetLastError();
}

cudaError_t launchAbsMaxBits(const float* x, const float* e, size_t n, unsigned* amaxBits, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  absMaxKernel<<<detail::gridFor(n), kThreads, 0, stream>>>(x, e, n, amaxBits);
  return cudaGetLastError();
}

cudaError_t launchEncodeNvfp4Blocks(const float* x, const float* e, size_t n, size_t blockSize, float t,
                                    uint8_t* codes, uint8_t* scaleCodes, float* residual,
                                    unsigned long long* saturated, unsigned long long* firstBad, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  encodeNvfp4Kernel<<<detail::gridFor(blocksOf(n, blockSize)), kThreads, 0, stream>>>(
      x, e, n, blockSize, t, codes, scaleCodes, residual, saturated, firstBad);
  return cudaGetLastError();
}

cudaError_t launchDecodeNvfp4(const uint8_t* packed, size_t n, size_t blockSize, const uint8_t* scaleCodes, float t,
                              float* out, bool accumulate, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  decodeNvfp4Kernel<<<detail::gridFor(n), kThreads, 0, stream>>>(packed, n, blockSize, scaleCodes, t, out, accumulate);
  return cudaGetLastError();
}

cudaError_t launchFindBadNvfp4Scales(const uint8_t* scaleCodes, size_t blocks, unsigned long long* firstBad,
                                     cudaStream_t stream) {
  if (blocks == 0) return cudaSuccess;
  findBadNvfp4ScalesKernel<<<detail::gridFor(blocks), kThreads, 0, stream>>>(scaleCodes, blocks, firstBad);
  return cudaGetLastError();
}

cudaError_t launchEncodeInt4Blocks(const float* x, const float* e, size_t n, size_t blockSize, bool stochastic,
                                   scalar::RngStream rng, uint8_t* nibbles, float* scales, float* residual,
                                   unsigned long long* firstBad, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  encodeInt4Kernel<<<detail::gridFor(blocksOf(n, blockSize)), kThreads, 0, stream>>>(
      x, e, n, blockSize, stochastic, rng, nibbles, scales, residual, firstBad);
  return cudaGetLastError();
}

cudaError_t launchDecodeInt4(const uint8_t* packed, size_t n, size_t blockSize, const float* scales, float* out,
                             bool accumulate, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  decodeInt4Kernel<<<detail::gridFor(n), kThreads, 0, stream>>>(packed, n, blockSize, scales, out, accumulate);
  return cudaGetLastError();
}

cudaError_t launchFindInt4Minimum(const uint8_t* packed, size_t n, unsigned long long* firstBad, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  findInt4MinimumKernel<<<detail::gridFor(n), kThreads, 0, stream>>>(packed, n, firstBad);
  return cudaGetLastError();
}

}  // namespace gradcomp::cuda
