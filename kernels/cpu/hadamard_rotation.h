// The CPU side of the keyed randomized Hadamard rotation (kernels/scalar/hadamard_rotation.h):
// forward y = H D x / sqrt(b) and inverse x = D H y / sqrt(b), blockwise over a whole tensor, O(n log b).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/scalar/hadamard_rotation.h"

namespace gradcomp::cpu {

// y may alias x. `prescale` multiplies every input first (the codec's power of two that keeps the
// butterflies' sums below FLT_MAX). `first`: the tensor index of x[0], so a chunk of a tensor rotates as
// it does inside the whole tensor; it must be a multiple of blockSize, and n either a multiple of
// blockSize or the rest of the tensor (whose tail then splits into the same smaller blocks).
// inputMaxBits, when given, receives the largest |x[i]| as fp32 bits (at or past Inf's when x holds NaN
// or Inf), found on the rotation's own read of x: the encoder's check without a pass of its own.
void rotateForward(const float* x, float* y, size_t n, size_t blockSize, const scalar::RotationKey& key,
                   float prescale, uint64_t first = 0, uint32_t* inputMaxBits = nullptr);
// x = D H y / sqrt(b) x postscale, saturated to +-FLT_MAX where that product overflows; x may alias y.
void rotateInverse(const float* y, float* x, size_t n, size_t blockSize, const scalar::RotationKey& key,
                   float postscale, uint64_t first = 0);

}  // namespace gradcomp::cpu
