// Launchers of the CUDA twins of the block-scaled int8 / FP8 kernels and the scaled-sign kernels
// (kernels/cpu/block_scale_kernels.h, kernels/cpu/sign_kernels.h): the same codes, scales and bits as
// the CPU reference, built on the shared scalar conversions (kernels/scalar/float_formats.h). All
// pointers are device pointers; any alignment. One warp per codec block: the block's amax is
// reduced in registers and warp shuffles, then the same warp quantizes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/scalar/float_formats.h"
#include "kernels/scalar/philox.h"

namespace gradcomp::cuda {

// Every encoder reads c = x + e (e may be null: c = x; the fused error-feedback input), and writes to
// firstBad (device, may be null) the smallest index whose c is NaN/Inf.
// int8, symmetric [-127, 127], scale = 127 / amax per block. stochastic: rounding floor(v + u) with u
// the stream's uniform of global element `first + i` (as cpu::fillRoundingFields); otherwise nearest even.
// residual (may be x itself, or null): x - decoded, the fused error-feedback update.
cudaError_t launchEncodeInt8Blocks(const float* x, const float* e, size_t n, size_t blockSize, bool stochastic,
                                   scalar::RngStream stream, uint64_t first, int8_t* codes, float* scales,
                                   float* residual, unsigned long long* firstBad, cudaStream_t cudaStream);
cudaError_t launchDecodeInt8Blocks(const int8_t* codes, size_t n, size_t blockSize, const float* scales, float* out,
                                   bool accumulate, cudaStream_t cudaStream);

// FP8 (E4M3 / E5M2), saturating, scale = max / amax per block; `saturated` (device counter) counts
// values beyond the format's range.
cudaError_t launchEncodeFp8Blocks(const float* x, const float* e, size_t n, size_t blockSize, scalar::Fp8Format fmt,
                                  uint8_t* codes, float* scales, unsigned long long* saturated, float* residual,
                                  unsigned long long* firstBad, cudaStream_t cudaStream);
cudaError_t launchDecodeFp8Blocks(const uint8_t* codes, size_t n, size_t blockSize, scalar::Fp8Format fmt,
                                  const float* scales, float* out, bool accumulate, cudaStream_t cudaStream);

// Scaled sign: bit = x > 0 (zeros: 1 at even, 0 at odd global index), packed LSB-first with
// __ballot_sync; scale = mean |x| per block summed in double over 8 interleaved lanes in the CPU's
// order. blockSize must be a multiple of 32 (the codec's default is 1024): cudaErrorInvalidValue
// otherwise. Bits of the last byte past n are zero; no byte past ceil(n / 8) is written.
cudaError_t launchEncodeSignBlocks(const float* x, const float* e, size_t n, size_t blockSize, uint8_t* bits,
                                   float* scales, float* residual, unsigned long long* firstBad,
                                   cudaStream_t cudaStream);
cudaError_t launchDecodeSignBlocks(const uint8_t* bits, size_t n, size_t blockSize, const float* scales, float* out,
                                   bool accumulate, cudaStream_t cudaStream);

// The encoders convert with the shared scalar floatToFp8 (bit-exact with the CPU by construction).
// This counts, over every finite fp32 bit pattern, where cuda_fp8.h's saturating hardware conversion
// (__nv_cvt_float_to_fp8 with __NV_SATFINITE) gives another byte: zero would let the kernels use it.
cudaError_t launchCountFp8IntrinsicMismatches(scalar::Fp8Format fmt, unsigned long long* mismatches,
                                              cudaStream_t cudaStream);

}  // namespace gradcomp::cuda
