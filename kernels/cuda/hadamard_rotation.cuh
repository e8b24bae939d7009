// The CUDA twin of kernels/cpu/hadamard_rotation.h: the same blocks (full ones, then the tail's smaller
// powers of two), the same sign stream and the same butterflies in the same order, so the rotated values
// are the CPU's bits.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/scalar/hadamard_rotation.h"

namespace gradcomp::cuda {

// Forward: y = H D ((x + e) x prescale) / sqrt(b) (e may be null). Inverse: y = D H x / sqrt(b) x scale,
// saturated to +-FLT_MAX where that product overflows. y may alias x. blockSize: a power of two <= 8192.
cudaError_t launchRotate(const float* x, const float* e, float* y, size_t n, size_t blockSize,
                         const scalar::RotationKey& key, float scale, bool inverse, cudaStream_t stream);

}  // namespace gradcomp::cuda
