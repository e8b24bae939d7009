// Philox4x32-10 on vector lanes: 8 (AVX2) or 16 (AVX-512) consecutive calls of one stream at a time, each
// lane's four words equal to scalar::RngStream::block's, and their words stored in stream order. Used
// where many calls are needed at once: the stochastic rounding fields (rounding_fields.cc) and the
// rotation's signs (hadamard_rotation.cc). Compiled for the -march of the file that includes it (these
// are not run-time dispatched), after that file's <immintrin.h>.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/scalar/philox.h"

namespace gradcomp::cpu {

using scalar::kPhiloxM0, scalar::kPhiloxM1, scalar::kPhiloxW0, scalar::kPhiloxW1;

// A batch's lanes are consecutive calls of one stream: their counters differ only in word 0 (the block
// index's low word) wherever that word does not wrap within the batch. Words 1-3 (the index's high word,
// step, tensor) are then the same in every lane, and so is part of each of the first three rounds:
//   round 0: M1 * step, hence new words 0 and 1;    round 1: M0 * (that word 0), hence new word 3;
//   round 2: only its xor with word 3.
// Those are computed here once per batch step, on scalars, and what the vector rounds still need is one
// xor operand per round (the rounds then issue 12 % fewer vector instructions: philoxRounds).
struct PhiloxSharedRounds {
  uint32_t round0Word2;  // xored into round 0's new word 2: tensor ^ k1
  uint32_t round1Word0;  // xored into round 1's new word 0: round 0's word 1 ^ k0
  uint32_t round1Word2;  // xored into round 1's new word 2: hi(M0 x round 0's word 0) ^ k1
  uint32_t round2Word2;  // xored into round 2's new word 2: round 1's word 3 ^ k1
  uint32_t round2Key0;   // round 2's k0
  uint32_t k0, k1;       // round 3's keys

  static PhiloxSharedRounds make(const scalar::RngStream& s, uint32_t blockHighWord) {
    uint32_t k0 = s.k0, k1 = s.k1;
    uint32_t hi, lo;
    scalar::mulHiLo(kPhiloxM1, s.step, hi, lo);
    const uint32_t word0 = hi ^ blockHighWord ^ k0, word1 = lo;  // round 0's new words 0 and 1
    PhiloxSharedRounds r{};
    r.round0Word2 = s.tensor ^ k1;
    k0 += kPhiloxW0, k1 += kPhiloxW1;
    scalar::mulHiLo(kPhiloxM0, word0, hi, lo);  // round 1: lo is its new word 3
    r.round1Word0 = word1 ^ k0;
    r.round1Word2 = hi ^ k1;
    k0 += kPhiloxW0, k1 += kPhiloxW1;
    r.round2Word2 = lo ^ k1;
    r.round2Key0 = k0;
    r.k0 = k0 + kPhiloxW0, r.k1 = k1 + kPhiloxW1;
    return r;
  }
};

// Whether the lanes of calls block .. block + calls - 1 share the block index's high word.
inline bool philoxHighWordShared(uint64_t block, uint32_t calls) {
  return static_cast<uint32_t>(block) <= UINT32_MAX - (calls - 1);
}

// What the rounds need of a vector width (PhiloxAvx2, PhiloxAvx512): its vector type Vec and lane count,
// a broadcast, the lanes' indices, a lane-wise sum, the xor of two and of three vectors, the hi and lo
// halves of a 32 x 32-bit product per lane, and a batch's counters. (The width is a tag type, not the
// vector type itself: a vector type as a template argument loses its attributes, which GCC warns of.)

// The four counter words of a batch of consecutive Philox calls, lane L holding call block + L, and
// after the rounds their four output words (word w of lane L in cw).
template <class Isa>
struct PhiloxBatch {
  typename Isa::Vec c0, c1, c2, c3;
};

#if defined(__AVX2__)

struct PhiloxAvx2 {
  using Vec = __m256i;
  static constexpr uint32_t kLanes = 8;
  static __m256i broadcast(uint32_t v) { return _mm256_set1_epi32(static_cast<int32_t>(v)); }
  static __m256i laneIndex() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static __m256i add(__m256i a, __m256i b) { return _mm256_add_epi32(a, b); }
  static __m256i xor2(__m256i a, __m256i b) { return _mm256_xor_si256(a, b); }
  static __m256i xor3(__m256i a, __m256i b, __m256i c) { return _mm256_xor_si256(_mm256_xor_si256(a, b), c); }
  // vpmuludq multiplies the even lanes, so the odd lanes are shifted down, multiplied, and the high halves
  // blended back; the low halves are one vpmulld (a shift and a blend took two instructions, and the
  // rounds are bound by instruction count: int8 stochastic encode 11.7 -> 10.9 ms per 16M values on a
  // Zen 3 EPYC, and slower on the Zen 4 too).
  static void mulHiLo(__m256i a, __m256i b, __m256i& hi, __m256i& lo) {
    const __m256i even = _mm256_mul_epu32(a, b);                        // lanes 0,2,4,6
    const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), b);  // lanes 1,3,5,7
    lo = _mm256_mullo_epi32(a, b);
    hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xaa);
  }
  static PhiloxBatch<PhiloxAvx2> counters(const scalar::RngStream& s, uint64_t block) {
    const __m256i lane = laneIndex();
    // 64-bit block index + lane: low word with carry into the high word.
    const __m256i lo = _mm256_add_epi32(broadcast(static_cast<uint32_t>(block)), lane);
    const __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(lane, _mm256_set1_epi32(INT32_MIN)),
                                             _mm256_xor_si256(lo, _mm256_set1_epi32(INT32_MIN)));  // lo < lane: wrapped
    return {lo, _mm256_sub_epi32(broadcast(static_cast<uint32_t>(block >> 32)), carry), broadcast(s.step),
            broadcast(s.tensor)};
  }
};
using Philox8 = PhiloxBatch<PhiloxAvx2>;

#endif

#if defined(__AVX512F__)

struct PhiloxAvx512 {
  using Vec = __m512i;
  static constexpr uint32_t kLanes = 16;
  static __m512i broadcast(uint32_t v) { return _mm512_set1_epi32(static_cast<int32_t>(v)); }
  static __m512i laneIndex() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  static __m512i add(__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }
  static __m512i xor2(__m512i a, __m512i b) { return _mm512_xor_si512(a, b); }
  static __m512i xor3(__m512i a, __m512i b, __m512i c) { return _mm512_ternarylogic_epi32(a, b, c, 0x96); }  // one vpternlogd
  // vpmuludq multiplies the even lanes; the odd lanes are moved down for a second one. Each half of a
  // 64-bit product goes to its lane by a masked dword swap within the 64-bit pair (one instruction where
  // a shift and a blend took two).
  static void mulHiLo(__m512i a, __m512i b, __m512i& hi, __m512i& lo) {
    const __m512i even = _mm512_mul_epu32(a, b);
    const __m512i odd = _mm512_mul_epu32(_mm512_shuffle_epi32(a, _MM_PERM_CDAB), b);
    lo = _mm512_mask_shuffle_epi32(even, 0xaaaa, odd, _MM_PERM_CDAB);  // odd lanes: odd product's low half
    hi = _mm512_mask_shuffle_epi32(odd, 0x5555, even, _MM_PERM_CDAB);  // even lanes: even product's high half
  }
  static PhiloxBatch<PhiloxAvx512> counters(const scalar::RngStream& s, uint64_t block) {
    const __m512i lane = laneIndex();
    const __m512i lo = _mm512_add_epi32(broadcast(static_cast<uint32_t>(block)), lane);
    const __mmask16 wrapped = _mm512_cmplt_epu32_mask(lo, lane);
    const __m512i hiWord = broadcast(static_cast<uint32_t>(block >> 32));
    return {lo, _mm512_mask_add_epi32(hiWord, wrapped, hiWord, _mm512_set1_epi32(1)), broadcast(s.step), broadcast(s.tensor)};
  }
};
using Philox16 = PhiloxBatch<PhiloxAvx512>;

#endif

// Work a caller interleaves with the rounds (onRound(r, rounds) after the r-th of `rounds` vector
// rounds): software prefetches spread over the rounds' arithmetic rather than issued in one burst
// (rounding_fields.cc). By default none.
struct NoRoundWork {
  void operator()(int, int) const {}
};

// Philox4x32-10's rounds firstRound .. 9 on K batches side by side, from the keys k0, k1 of firstRound, the
// same rounds as scalar::philox4x32_10. A round is a chain of dependent steps (multiply, swap or blend,
// xor, about 8 cycles), and one batch alone left the multiplier idle between them (AVX-512, two batches:
// 3.1 against 3.8 ms per 16M elements; four against two: 3.9-4.1 against 4.5-4.8 ms per 2M calls on the
// Xeon of 2026-12-04, where a round of two batches still waited on its chain; six spill. AVX2: four, in
// spite of spilling some of AVX2's 16 registers; two and three were slower, docs/notes.md twenty-fifth part).
template <class Isa, int K, class OnRound = NoRoundWork>
inline void philoxRoundsFrom(int firstRound, uint32_t k0, uint32_t k1, PhiloxBatch<Isa> (&c)[K],
                             const OnRound& onRound = {}) {
  using V = typename Isa::Vec;
  const V m0 = Isa::broadcast(kPhiloxM0), m1 = Isa::broadcast(kPhiloxM1);
  for (int round = firstRound; round < 10; ++round) {
    const V key0 = Isa::broadcast(k0), key1 = Isa::broadcast(k1);
    for (int b = 0; b < K; ++b) {
      V hi0, lo0, hi1, lo1;
      Isa::mulHiLo(c[b].c0, m0, hi0, lo0);
      Isa::mulHiLo(c[b].c2, m1, hi1, lo1);
      c[b] = {Isa::xor3(hi1, c[b].c1, key0), lo1, Isa::xor3(hi0, c[b].c3, key1), lo0};
    }
    onRound(round - firstRound, 10 - firstRound);
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
}

// Philox calls block .. block + K kLanes - 1 (lane L of batch b: call block + b kLanes + L), all ten
// rounds. Where the lanes share the counter's high word, rounds 0-2 take PhiloxSharedRounds' scalars:
// round 0 is one multiply and an xor, round 1 one multiply and two xors, round 2 one xor fewer (142
// instead of 160 vector instructions per 8 calls on AVX2; docs/notes.md, twenty-fifth part). onRound runs
// after each of the rounds left to philoxRoundsFrom (7, or all 10).
template <class Isa, int K, class OnRound = NoRoundWork>
inline void philoxRounds(const scalar::RngStream& s, uint64_t block, PhiloxBatch<Isa> (&c)[K],
                         const OnRound& onRound = {}) {
  using V = typename Isa::Vec;
  if (!philoxHighWordShared(block, Isa::kLanes * K)) {
    for (int b = 0; b < K; ++b) c[b] = Isa::counters(s, block + Isa::kLanes * static_cast<uint64_t>(b));
    philoxRoundsFrom(0, s.k0, s.k1, c, onRound);
    return;
  }
  const PhiloxSharedRounds shared = PhiloxSharedRounds::make(s, static_cast<uint32_t>(block >> 32));
  const V m0 = Isa::broadcast(kPhiloxM0), m1 = Isa::broadcast(kPhiloxM1), lane = Isa::laneIndex();
  {  // round 0: words 0 and 1 are scalars
    const V xor2 = Isa::broadcast(shared.round0Word2);
    for (int b = 0; b < K; ++b) {
      V hi0, lo0;
      const uint32_t first = static_cast<uint32_t>(block) + Isa::kLanes * static_cast<uint32_t>(b);  // never wraps here
      Isa::mulHiLo(Isa::add(Isa::broadcast(first), lane), m0, hi0, lo0);
      c[b].c2 = Isa::xor2(hi0, xor2);
      c[b].c3 = lo0;
    }
  }
  {  // round 1: word 0's product is a scalar; the new word 3 (its low half) is too, so it stays out of the lanes
    const V xor0 = Isa::broadcast(shared.round1Word0), xor2 = Isa::broadcast(shared.round1Word2);
    for (int b = 0; b < K; ++b) {
      V hi1, lo1;
      Isa::mulHiLo(c[b].c2, m1, hi1, lo1);
      c[b].c2 = Isa::xor2(c[b].c3, xor2);
      c[b].c0 = Isa::xor2(hi1, xor0);
      c[b].c1 = lo1;
    }
  }
  {  // round 2: word 3 is a scalar (round 1's), folded into the xor
    const V key0 = Isa::broadcast(shared.round2Key0), xor2 = Isa::broadcast(shared.round2Word2);
    for (int b = 0; b < K; ++b) {
      V hi0, lo0, hi1, lo1;
      Isa::mulHiLo(c[b].c0, m0, hi0, lo0);
      Isa::mulHiLo(c[b].c2, m1, hi1, lo1);
      c[b] = {Isa::xor3(hi1, c[b].c1, key0), lo1, Isa::xor2(hi0, xor2), lo0};
    }
  }
  philoxRoundsFrom(3, shared.k0, shared.k1, c, onRound);
}

#if defined(__AVX2__)

// A batch's 32 words stored in stream order (out[4L + w] is word w of lane L): a 4 x 8 transpose.
inline void store8InOrder(const Philox8& c, uint32_t out[32]) {
  const __m256i t0 = _mm256_unpacklo_epi32(c.c0, c.c1), t1 = _mm256_unpackhi_epi32(c.c0, c.c1);
  const __m256i t2 = _mm256_unpacklo_epi32(c.c2, c.c3), t3 = _mm256_unpackhi_epi32(c.c2, c.c3);
  const __m256i r0 = _mm256_unpacklo_epi64(t0, t2), r1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i r2 = _mm256_unpacklo_epi64(t1, t3), r3 = _mm256_unpackhi_epi64(t1, t3);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permute2x128_si256(r0, r1, 0x20));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8), _mm256_permute2x128_si256(r2, r3, 0x20));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16), _mm256_permute2x128_si256(r0, r1, 0x31));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 24), _mm256_permute2x128_si256(r2, r3, 0x31));
}

// Philox calls block .. block + 8K (K batches of 8 lanes), their 32K words in stream order.
template <int K, class OnRound = NoRoundWork>
inline void philox8InOrder(const scalar::RngStream& s, uint64_t block, uint32_t* out, const OnRound& onRound = {}) {
  Philox8 c[K];
  philoxRounds(s, block, c, onRound);
  for (int b = 0; b < K; ++b) store8InOrder(c[b], out + 32 * b);
}

#endif

#if defined(__AVX512F__)

// A batch's words stored in stream order: out[4L + w] is word w of lane L. Within each 128-bit chunk
// one lane's 4 words (lanes 0,4,8,12 in r0; 1,5,9,13 in r1 ...), then the chunks put in lane order.
inline void storeInOrder(const Philox16& c, uint32_t out[64]) {
  const __m512i t0 = _mm512_unpacklo_epi32(c.c0, c.c1), t1 = _mm512_unpackhi_epi32(c.c0, c.c1);
  const __m512i t2 = _mm512_unpacklo_epi32(c.c2, c.c3), t3 = _mm512_unpackhi_epi32(c.c2, c.c3);
  const __m512i r0 = _mm512_unpacklo_epi64(t0, t2), r1 = _mm512_unpackhi_epi64(t0, t2);
  const __m512i r2 = _mm512_unpacklo_epi64(t1, t3), r3 = _mm512_unpackhi_epi64(t1, t3);
  const __m512i a01 = _mm512_shuffle_i32x4(r0, r1, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i a23 = _mm512_shuffle_i32x4(r2, r3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i b01 = _mm512_shuffle_i32x4(r0, r1, _MM_SHUFFLE(3, 2, 3, 2));
  const __m512i b23 = _mm512_shuffle_i32x4(r2, r3, _MM_SHUFFLE(3, 2, 3, 2));
  _mm512_storeu_si512(out, _mm512_shuffle_i32x4(a01, a23, _MM_SHUFFLE(2, 0, 2, 0)));       // lanes 0-3
  _mm512_storeu_si512(out + 16, _mm512_shuffle_i32x4(a01, a23, _MM_SHUFFLE(3, 1, 3, 1)));  // lanes 4-7
  _mm512_storeu_si512(out + 32, _mm512_shuffle_i32x4(b01, b23, _MM_SHUFFLE(2, 0, 2, 0)));  // lanes 8-11
  _mm512_storeu_si512(out + 48, _mm512_shuffle_i32x4(b01, b23, _MM_SHUFFLE(3, 1, 3, 1)));  // lanes 12-15
}

// Philox calls block .. block + 16K (K batches of 16 lanes), their 64K words in stream order.
template <int K, class OnRound = NoRoundWork>
inline void philox16InOrder(const scalar::RngStream& s, uint64_t block, uint32_t* out, const OnRound& onRound = {}) {
  Philox16 c[K];
  philoxRounds(s, block, c, onRound);
  for (int b = 0; b < K; ++b) storeInOrder(c[b], out + 64 * b);
}

#endif

// No work beside any step of philoxWordsInOrder.
struct NoStepWork {
  NoRoundWork operator()(size_t, size_t) const { return {}; }
};

// The words of Philox calls block .. block + calls, in stream order (out[4c + w]: word w of call c), on
// the widest vector path compiled in: four batches side by side while a step fits (philoxRoundsFrom: they
// keep the multiplier busy), then two (AVX-512), then one, so that a short run keeps its calls in lanes;
// the last few calls one by one. stepWork(c, count) gives the OnRound work of the step making calls
// c .. c + count - 1 (rounding_fields.cc: the read-ahead's prefetches, a share after each round); the
// calls made one by one get theirs before them, as one round of one.
template <class StepWork = NoStepWork>
inline void philoxWordsInOrder(const scalar::RngStream& s, uint64_t block, size_t calls, uint32_t* out,
                               const StepWork& stepWork = {}) {
  size_t c = 0;
#if defined(__AVX512F__)
  for (; c + 64 <= calls; c += 64) philox16InOrder<4>(s, block + c, out + 4 * c, stepWork(c, 64));
  for (; c + 32 <= calls; c += 32) philox16InOrder<2>(s, block + c, out + 4 * c, stepWork(c, 32));
  for (; c + 16 <= calls; c += 16) philox16InOrder<1>(s, block + c, out + 4 * c, stepWork(c, 16));
#elif defined(__AVX2__)
  for (; c + 32 <= calls; c += 32) philox8InOrder<4>(s, block + c, out + 4 * c, stepWork(c, 32));
  for (; c + 8 <= calls; c += 8) philox8InOrder<1>(s, block + c, out + 4 * c, stepWork(c, 8));
#endif
  if (c < calls) stepWork(c, calls - c)(0, 1);
  for (; c < calls; ++c) {
    const scalar::Philox4 w = s.block(block + c);
    for (int k = 0; k < 4; ++k) out[4 * c + static_cast<size_t>(k)] = w.v[k];
  }
}

}  // namespace gradcomp::cpu
