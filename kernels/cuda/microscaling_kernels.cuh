// CUDA twins of kernels/cpu/microscaling_kernels.h (MX, NVFP4) and of int4's symmetric block encode:
// the per-element steps are the shared scalar ones (kernels/scalar/element_formats.h,
// scale_limits.h), so the bytes equal the CPU's. Encoders write one code byte per element into a
// scratch buffer that launchPackCodes (level_kernels.cuh) packs, exactly as the CPU tiles pack theirs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/scalar/element_formats.h"
#include "kernels/scalar/philox.h"

namespace gradcomp::cuda {

// MX: per block the E8M0 shared scale code, then element codes and (residual != null) residual =
// c - decoded, with c = x (+ e). Saturations added to *saturated, the first NaN/Inf input to *firstBad.
cudaError_t launchEncodeMxBlocks(const float* x, const float* e, size_t n, size_t blockSize,
                                 scalar::ElementFormat fmt, uint8_t* codes, uint8_t* scaleCodes, float* residual,
                                 unsigned long long* saturated, unsigned long long* firstBad, cudaStream_t stream);
// out[i] (=|+=) element x 2^(scale - 127), from codes packed at `bits` per element.
cudaError_t launchDecodeMx(const uint8_t* packed, size_t n, size_t blockSize, scalar::ElementFormat fmt,
                           const uint8_t* scaleCodes, float* out, bool accumulate, cudaStream_t stream);
// Scale codes that are NaN (0xff) or make the largest element overflow (index = block).
cudaError_t launchFindBadMxScales(const uint8_t* scaleCodes, size_t blocks, scalar::ElementFormat fmt,
                                  unsigned long long* firstBad, cudaStream_t stream);

// *amaxBits (device, start at 0) = max |x (+ e)| bits over the tensor: NVFP4's tensor scale input.
cudaError_t launchAbsMaxBits(const float* x, const float* e, size_t n, unsigned* amaxBits, cudaStream_t stream);
cudaError_t launchEncodeNvfp4Blocks(const float* x, const float* e, size_t n, size_t blockSize, float t,
                                    uint8_t* codes, uint8_t* scaleCodes, float* residual,
                                    unsigned long long* saturated, unsigned long long* firstBad, cudaStream_t stream);
cudaError_t launchDecodeNvfp4(const uint8_t* packed, size_t n, size_t blockSize, const uint8_t* scaleCodes, float t,
                              float* out, bool accumulate, cudaStream_t stream);
// E4M3 block scale codes that are negative or NaN (index = block).
cudaError_t launchFindBadNvfp4Scales(const uint8_t* scaleCodes, size_t blocks, unsigned long long* firstBad,
                                     cudaStream_t stream);

// int4: symmetric codes in [-7, 7] as two's complement nibbles, scale = 7 / amax per block (the int8
// rules of scale_limits.h), nearest-even or stochastic rounding with the Philox stream keyed as the CPU's.
cudaError_t launchEncodeInt4Blocks(const float* x, const float* e, size_t n, size_t blockSize, bool stochastic,
                                   scalar::RngStream rng, uint8_t* nibbles, float* scales, float* residual,
                                   unsigned long long* firstBad, cudaStream_t stream);
cudaError_t launchDecodeInt4(const uint8_t* packed, size_t n, size_t blockSize, const float* scales, float* out,
                             bool accumulate, cudaStream_t stream);
// The nibble 0x8 (-8, outside the symmetric range) among the first n elements.
cudaError_t launchFindInt4Minimum(const uint8_t* packed, size_t n, unsigned long long* firstBad, cudaStream_t stream);

}  // namespace gradcomp::cuda
