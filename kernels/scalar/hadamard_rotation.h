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

// The CUDA kernel's schedule (kernels/cuda/hadamard_rotation.cu), here so that a host test can run it
// (tests/kernels/rotation_device_schedule_test.cc) where no GPU is:
// - butterfly p (0 <= p < size / 2) of the stage of span h combines elements a and a + h; a stage's
//   size / 2 butterflies touch each element once, so its threads may run them in any order;
struct ButterflyPair {
  uint64_t a, b;
};
GRADCOMP_HD ButterflyPair rotationButterfly(uint64_t p, uint64_t h) {
  const uint64_t a = (p / h) * 2 * h + p % h;
  return ButterflyPair{a, a + h};
}

// - one CUDA block per rotation block, of this many threads (each takes butterflies p, p + threads, ...);
constexpr uint64_t kRotationMaxThreads = 512;
GRADCOMP_HD uint64_t rotationThreads(uint64_t size) {
  return size / 2 < kRotationMaxThreads ? (size / 2 ? size / 2 : 1) : kRotationMaxThreads;
}

// - the launches over an n-element tensor with nominal block b: f(start, size, count) for `count` blocks of
//   `size` elements from `start`: the full blocks in one launch, then each smaller block of the tail (the
//   blocks rotationBlockOf names, in order).
template <typename F>
void forEachRotationLaunch(uint64_t n, uint64_t b, F&& f) {
  const uint64_t full = n / b;
  if (full) f(uint64_t{0}, b, full);
  uint64_t start = full * b;
  for (uint64_t size = b >> 1; size > 0; size >>= 1)
    if (start + size <= n) {
      f(start, size, uint64_t{1});
      start += size;
    }
}

// 1 / sqrt(size) as applied after the butterflies: exact for even log2(size), else rounded once.
GRADCOMP_HD float rotationNorm(uint64_t size) {
  int m = 0;
  while ((uint64_t{1} << m) < size) ++m;
  const float half = bitsToFloat(static_cast<uint32_t>(127 - m / 2) << 23);  // 2^-floor(m/2)
  return (m & 1) ? half * 0.70710678118654752f : half;
}

}  // namespace gradcomp::scalar
