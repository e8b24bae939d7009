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

// The round multipliers and the key's steps (Weyl sequence) of Philox4x32.
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

GRADCOMP_HD Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulHiLo(kPhiloxM0, ctr.v[0], hi0, lo0);
    mulHiLo(kPhiloxM1, ctr.v[2], hi1, lo1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return ctr;
}

// Random bits per stochastic-rounding uniform (roundingUniform): 16 by default, 8 where a codec is asked
// for rounding_bits=8 (half the Philox calls, a coarser bias bound; see roundingUniform).
constexpr uint32_t kDefaultRoundingBits = 16;

// The stream of one (seed, rank, step, tensor): element i uses word i % 4 of counter block i / 4.
// The rank is folded into the key by an odd multiplier, a bijection for a fixed seed, so two ranks
// never share a key (the llm.c #597 bug). Steps and tensor ids are 32-bit counter words.
// roundingBits (8, or 16 for any other value) is how roundingUniform cuts the words into fields; the
// words themselves, and every other use of the stream, do not depend on it.
struct RngStream {
  uint32_t k0, k1, step, tensor;
  uint32_t roundingBits = kDefaultRoundingBits;

  GRADCOMP_HD static RngStream make(uint64_t seed, uint32_t rank, uint32_t step, uint32_t tensor) {
    const uint64_t key = seed ^ (static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull);
    return RngStream{static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32), step, tensor};
  }

  // The same stream, its rounding uniforms cut into `bits`-bit fields (8 or 16).
  GRADCOMP_HD RngStream withRoundingBits(uint32_t bits) const {
    RngStream s = *this;
    s.roundingBits = bits;
    return s;
  }

  // Four 32-bit words for elements 4*block .. 4*block+3.
  GRADCOMP_HD Philox4 block(uint64_t blockIndex) const {
    return philox4x32_10(Philox4{{static_cast<uint32_t>(blockIndex), static_cast<uint32_t>(blockIndex >> 32), step, tensor}}, k0, k1);
  }

  GRADCOMP_HD uint32_t word(uint64_t element) const { return block(element >> 2).v[element & 3]; }
};

// Uniform in [0, 1) with 24 random bits: exact in fp32, identical on every backend.
GRADCOMP_HD float uniform01(uint32_t word) { return static_cast<float>(word >> 8) * 5.9604644775390625e-8f; }

// The uniform of stochastic rounding (int8 / int4 rounding=stochastic, qsgd, terngrad): b = s.roundingBits
// random bits per element (8 or 16), u = (k + 1/2) / 2^b, k the (i mod E)-th field of word i / E of the
// stream (E = 32 / b fields per word, low bits first), so one Philox call serves 4E elements (8 at 16
// bits, 16 at 8) instead of 4. The midpoint grid keeps the rounding unbiased to within half a grid step:
//   |E[floor(v + u)] - v| <= 2^-(b + 1)   and   |P(u < r) - r| <= 2^-(b + 1)
// in units of the quantization step (tests/compressors/stochastic_codecs_test.cc checks both exactly,
// over all 2^b draws, at both widths): 2^-17 of a step at 16 bits, 2^-9 at 8. u is exact in fp32; the sums
// v + u the codecs form are fp32 additions, rounded alike on every path (the test forms them the same way).
GRADCOMP_HD float roundingUniform(const RngStream& s, uint64_t i) {
  const uint32_t bits = s.roundingBits == 8 ? 8u : 16u;  // any other value reads as the default
  const int fieldsLog2 = bits == 8 ? 2 : 1;  // log2(32 / bits)
  const uint32_t w = s.word(i >> fieldsLog2);
  const uint32_t field = static_cast<uint32_t>(i & ((1u << fieldsLog2) - 1u));
  const uint32_t k = (w >> (bits * field)) & ((1u << bits) - 1u);
  return (static_cast<float>(k) + 0.5f) * (1.0f / static_cast<float>(1u << bits));  // 2^-b: exact
}

}  // namespace gradcomp::scalar
