// Philox4x32-10 (Salmon et al., SC'11): a counter-based RNG, so any element's random number is a pure
// function of its key and counter. That is what makes stochastic codecs reproducible, lets CPU and
// CUDA produce the same bytes, and lets every (seed, rank, step, tensor, element) own its own stream.
#pragma once

#include "kernels/scalar/host_device.h"

namespace gradcomp::scalar {

struct Philox4 {
  uint32_t v[4];
};

GRADCOMP_HD void mulHiLo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

GRADCOMP_HD Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulHiLo(0xD2511F53u, ctr.v[0], hi0, lo0);
    mulHiLo(0xCD9E8D57u, ctr.v[2], hi1, lo1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

// The stream of one (seed, rank, step, tensor): element i uses word i % 4 of counter block i / 4.
// The rank is folded into the key by an odd multiplier, a bijection for a fixed seed, so two ranks
// never share a key (the llm.c #597 bug). Steps and tensor ids are 32-bit counter words.
struct RngStream {
  uint32_t k0, k1, step, tensor;

  GRADCOMP_HD static RngStream make(uint64_t seed, uint32_t rank, uint32_t step, uint32_t tensor) {
    const uint64_t key = seed ^ (static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull);
    return RngStream{static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32), step, tensor};
  }

  // Four 32-bit words for elements 4*block .. 4*block+3.
  GRADCOMP_HD Philox4 block(uint64_t blockIndex) const {
    return philox4x32_10(Philox4{{static_cast<uint32_t>(blockIndex), static_cast<uint32_t>(blockIndex >> 32), step, tensor}}, k0, k1);
  }

  GRADCOMP_HD uint32_t word(uint64_t element) const { return block(element >> 2).v[element & 3]; }
};

// Uniform in [0, 1) with 24 random bits: exact in fp32, identical on every backend.
GRADCOMP_HD float uniform01(uint32_t word) { return static_cast<float>(word >> 8) * 5.9604644775390625e-8f; }

// The uniform of stochastic rounding (int8 / int4 rounding=stochastic, qsgd, terngrad): kRoundingBits
// random bits per element, u = (k + 1/2) / 2^kRoundingBits, k the (i mod E)-th field of word i / E of the
// stream (E = 32 / kRoundingBits fields per word, low bits first), so one Philox call serves 4E elements
// instead of 4. The midpoint grid keeps the rounding unbiased to within half a grid step:
//   |E[floor(v + u)] - v| <= 2^-(kRoundingBits + 1)   and   |P(u < r) - r| <= 2^-(kRoundingBits + 1)
// in units of the quantization step (tests/compressors/stochastic_codecs_test.cc checks both exactly,
// over all 2^kRoundingBits draws). u and every sum v + u the codecs form are exact in fp32.
constexpr int kRoundingBits = 16;

GRADCOMP_HD float roundingUniform(const RngStream& s, uint64_t i) {
  constexpr int kFields = 32 / kRoundingBits;
  const uint32_t w = s.word(i / kFields);
  const uint32_t k = (w >> (kRoundingBits * static_cast<int>(i % kFields))) & ((1u << kRoundingBits) - 1u);
  return (static_cast<float>(k) + 0.5f) * (1.0f / static_cast<float>(1u << kRoundingBits));
}

}  // namespace gradcomp::scalar
