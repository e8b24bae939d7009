// Random-k's coordinates in bulk: out[i] = perm(first + i), the keyed Feistel permutation of
// kernels/scalar/feistel_permutation.h, 16 coordinates at a time on the avx512 path (domains up to 2^32,
// cycle-walking per lane under a mask), the scalar permutation elsewhere; the same values either way
// (tests/kernels/feistel_indices_test.cc). One coordinate is four dependent rounds of two multiplies,
// about 40 scalar instructions: the random-k decode spent most of its time here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/scalar/feistel_permutation.h"

namespace gradcomp::cpu {

void feistelIndices(const scalar::FeistelPermutation& perm, uint64_t first, size_t count, uint64_t* out);

}  // namespace gradcomp::cpu
