// The keyed randomized Hadamard rotation of the quantizing codecs (rotate=hadamard): per block of
// b = 2^m elements, y = H D x / sqrt(b), with H the Sylvester-Hadamard matrix and D a Rademacher
// diagonal keyed by (seed, step, tensor) but not by rank, so every rank rotates alike and the rotation
// commutes with summation (DRIVE / EDEN, THC, SDP4Bit). The transform is orthonormal and its own inverse
// up to D: x = D H y / sqrt(b). A tensor whose length is not a multiple of b ends in smaller power-of-two
// blocks (1000 with b = 256: 256, 256, 256, 128, 64, 32, 8), so no element is padded or left out.
//
// Shared by the CPU reference and a CUDA twin: the butterflies run in the same order (stage by stage,
// a' = a + b, b' = a - b), so every output is the same fp32 expression on both.
#pragma once

#include "kernels/scalar/philox.h"

namespace gradcomp::scalar {

// The sign stream: its own Philox key domain, so it is never the stream of a stochastic rounding.
struct RotationKey {
  uint64_t seed = 0;
  uint32_t step = 0, tensor = 0;
};

GRADCOMP_HD RngStream rotationStream(const RotationKey& k) {
  constexpr uint64_t kRotationDomain = 0x524f544154494f4eull;  // "ROTATION"
  return RngStream::make(k.seed ^ kRotationDomain, 0, k.step, k.tensor);
}

// D's entry for element i: bit (i % 32) of word i / 32 set -> -1.
GRADCOMP_HD bool rotationSignNegative(const RngStream& s, uint64_t i) { return (s.word(i >> 5) >> (i & 31)) & 1u; }

// The block containing element i of an n-element tensor with nominal block b: [start, start + size).
struct RotationBlock {
  uint64_t start, size;
};
GRADCOMP_HD RotationBlock rotationBlockOf(uint64_t i, uint64_t n, uint64_t b) {
  const uint64_t full = n - n % b;
  if (i < full) return RotationBlock{i - i % b, b};
  uint64_t start = full, size = b >> 1;
  while (size > 0) {
    if (start + size <= n) {
      if (i < start + size) return RotationBlock{start, size};
      start += size;
    }
    size >>= 1;
  }
  return RotationBlock{i, 1};
}

// 1 / sqrt(size) as applied after the butterflies: exact for even log2(size), else rounded once.
GRADCOMP_HD float rotationNorm(uint64_t size) {
  int m = 0;
  while ((uint64_t{1} << m) < size) ++m;
  const float half = bitsToFloat(static_cast<uint32_t>(127 - m / 2) << 23);  // 2^-floor(m/2)
  return (m & 1) ? half * 0.70710678118654752f : half;
}

}  // namespace gradcomp::scalar
