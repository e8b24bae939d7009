// Payload checks a decoder runs on the device before its first write: each finds the smallest index
// (element, block or entry) that is invalid and atomically lowers *firstBad to it (start it at
// UINT64_MAX). On a hit the codec copies the payload to the host and lets the CPU validator name the
// problem, so the error message is the same on both backends.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/scalar/float_formats.h"
#include "kernels/scalar/scale_limits.h"

namespace gradcomp::cuda {

// Block scales that break the codec's rule (kernels/scalar/scale_limits.h: non-finite, negative, zero when
// !allowZero, or a factor whose use in decoding overflows) (index = block).
cudaError_t launchFindBadScales(const float* scales, size_t count, scalar::ScaleRule rule, unsigned long long* firstBad,
                                cudaStream_t stream);
// onebit's (positive, negative) mean pairs: positive finite >= 0, negative finite <= 0 (index = block).
cudaError_t launchFindBadOneBitMeans(const float* means, size_t blocks, unsigned long long* firstBad,
                                     cudaStream_t stream);
// int8 code -128 (outside the symmetric range).
cudaError_t launchFindInt8Minimum(const int8_t* codes, size_t n, unsigned long long* firstBad, cudaStream_t stream);
// FP8 NaN/Inf codes.
cudaError_t launchFindNonFiniteFp8(const uint8_t* codes, size_t n, scalar::Fp8Format fmt,
                                   unsigned long long* firstBad, cudaStream_t stream);
// terngrad's invalid 2-bit code 3 among the first n elements.
cudaError_t launchFindTernaryCode3(const uint8_t* packed, size_t n, unsigned long long* firstBad,
                                   cudaStream_t stream);
// Sparse entries: index >= n, not strictly above the previous one, or a non-finite value (index = entry).
// indices: u32 or u64 (wideIndices); values: fp32 or fp16 bits.
cudaError_t launchFindBadSparseEntries(const void* indices, bool wideIndices, const void* values, bool fp16Values,
                                       size_t count, uint64_t n, unsigned long long* firstBad, cudaStream_t stream);
// Values only (random-k): non-finite fp32 or fp16, or non-finite once multiplied by scale (n/k, unbiased).
cudaError_t launchFindNonFiniteValues(const void* values, bool fp16Values, float scale, size_t count,
                                      unsigned long long* firstBad,
                                      cudaStream_t stream);

}  // namespace gradcomp::cuda
