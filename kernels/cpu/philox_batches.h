// Philox4x32-10 on vector lanes: 8 (AVX2) or 16 (AVX-512) consecutive calls of one stream at a time, each
// lane's four words equal to scalar::RngStream::block's, and their words stored in stream order. Used
// where many calls are needed at once: the stochastic rounding uniforms (block_scale_kernels.cc) and the
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
// xor operand per round (the rounds then issue 12 % fewer vector instructions: philox8Rounds, philoxRounds).
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

#if defined(__AVX2__)

// hi and lo 32 bits of a[i] * b (b a constant) on 8 lanes: vpmuludq multiplies the even lanes, so the
// odd lanes are shifted down, multiplied, and the high halves blended back; the low halves are one
// vpmulld (a shift and a blend took two instructions, and the rounds are bound by instruction count:
// int8 stochastic encode 11.7 -> 10.9 ms per 16M values on a Zen 3 EPYC).
inline void mulHiLo8(__m256i a, __m256i b, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, b);                                             // lanes 0,2,4,6
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), b);                       // lanes 1,3,5,7
  lo = _mm256_mullo_epi32(a, b);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xaa);
}

// The four counter words of 8 consecutive Philox blocks (block, block+1, ... in lanes 0..7).
struct Philox8 {
  __m256i c0, c1, c2, c3;
};

inline Philox8 philox8Counters(const scalar::RngStream& s, uint64_t block) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  // 64-bit block index + lane: low word with carry into the high word.
  const __m256i lo = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(block)), lane);
  const __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(lane, _mm256_set1_epi32(INT32_MIN)),
                                           _mm256_xor_si256(lo, _mm256_set1_epi32(INT32_MIN)));  // lo < lane: wrapped
  return {lo, _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int32_t>(block >> 32)), carry),
          _mm256_set1_epi32(static_cast<int32_t>(s.step)), _mm256_set1_epi32(static_cast<int32_t>(s.tensor))};
}

// Philox4x32-10's rounds firstRound .. 9 on K batches of 8 lanes side by side, from the keys k0, k1 of
// firstRound, the same rounds as scalar::philox4x32_10 (word w of lane L in c[b].cw). A round is a chain
// of dependent steps (multiply, blend, xor): one batch alone leaves the multiplier idle between them, as
// on AVX-512 (philoxRounds below); docs/notes.md has the timings.
template <int K>
inline void philox8RoundsFrom(int firstRound, uint32_t k0, uint32_t k1, Philox8 (&c)[K]) {
  const __m256i m0 = _mm256_set1_epi32(static_cast<int32_t>(kPhiloxM0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int32_t>(kPhiloxM1));
  for (int round = firstRound; round < 10; ++round) {
    const __m256i key0 = _mm256_set1_epi32(static_cast<int32_t>(k0)), key1 = _mm256_set1_epi32(static_cast<int32_t>(k1));
    for (int b = 0; b < K; ++b) {
      __m256i hi0, lo0, hi1, lo1;
      mulHiLo8(c[b].c0, m0, hi0, lo0);
      mulHiLo8(c[b].c2, m1, hi1, lo1);
      c[b] = {_mm256_xor_si256(_mm256_xor_si256(hi1, c[b].c1), key0), lo1,
              _mm256_xor_si256(_mm256_xor_si256(hi0, c[b].c3), key1), lo0};
    }
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
}

// Philox calls block .. block + 8K - 1 (lane L of batch b: call block + 8b + L), all ten rounds. Where the
// lanes share the counter's high word, rounds 0-2 take PhiloxSharedRounds' scalars: round 0 is one
// multiply and an xor, round 1 one multiply and two xors, round 2 one xor fewer (int8 stochastic encode,
// AVX2 path: docs/notes.md, twenty-fifth part).
template <int K>
inline void philox8Rounds(const scalar::RngStream& s, uint64_t block, Philox8 (&c)[K]) {
  if (!philoxHighWordShared(block, 8 * K)) {
    for (int b = 0; b < K; ++b) c[b] = philox8Counters(s, block + 8 * static_cast<uint64_t>(b));
    philox8RoundsFrom(0, s.k0, s.k1, c);
    return;
  }
  const PhiloxSharedRounds shared = PhiloxSharedRounds::make(s, static_cast<uint32_t>(block >> 32));
  const __m256i m0 = _mm256_set1_epi32(static_cast<int32_t>(kPhiloxM0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int32_t>(kPhiloxM1));
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const auto broadcast = [](uint32_t v) { return _mm256_set1_epi32(static_cast<int32_t>(v)); };
  {  // round 0: words 0 and 1 are scalars
    const __m256i xor2 = broadcast(shared.round0Word2);
    for (int b = 0; b < K; ++b) {
      __m256i hi0, lo0;
      mulHiLo8(_mm256_add_epi32(broadcast(static_cast<uint32_t>(block) + 8u * static_cast<uint32_t>(b)), lane), m0, hi0, lo0);
      c[b].c2 = _mm256_xor_si256(hi0, xor2);
      c[b].c3 = lo0;
    }
  }
  {  // round 1: word 0's product is a scalar; the new word 3 (its low half) is too, so it stays out of the lanes
    const __m256i xor0 = broadcast(shared.round1Word0), xor2 = broadcast(shared.round1Word2);
    for (int b = 0; b < K; ++b) {
      __m256i hi1, lo1;
      mulHiLo8(c[b].c2, m1, hi1, lo1);
      c[b].c2 = _mm256_xor_si256(c[b].c3, xor2);
      c[b].c0 = _mm256_xor_si256(hi1, xor0);
      c[b].c1 = lo1;
    }
  }
  {  // round 2: word 3 is a scalar (round 1's), folded into the xor
    const __m256i key0 = broadcast(shared.round2Key0), xor2 = broadcast(shared.round2Word2);
    for (int b = 0; b < K; ++b) {
      __m256i hi0, lo0, hi1, lo1;
      mulHiLo8(c[b].c0, m0, hi0, lo0);
      mulHiLo8(c[b].c2, m1, hi1, lo1);
      c[b] = {_mm256_xor_si256(_mm256_xor_si256(hi1, c[b].c1), key0), lo1, _mm256_xor_si256(hi0, xor2), lo0};
    }
  }
  philox8RoundsFrom(3, shared.k0, shared.k1, c);
}

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
template <int K>
inline void philox8InOrder(const scalar::RngStream& s, uint64_t block, uint32_t* out) {
  Philox8 c[K];
  philox8Rounds(s, block, c);
  for (int b = 0; b < K; ++b) store8InOrder(c[b], out + 32 * b);
}

#endif

#if defined(__AVX512F__)

// The 32 x 32 -> 64-bit products of 16 lanes: vpmuludq multiplies the even lanes; the odd lanes are
// moved down for a second one. Each half of a 64-bit product goes to its lane by a masked dword swap
// within the 64-bit pair (one instruction where a shift and a blend took two).
inline void mulHiLo16(__m512i a, __m512i b, __m512i& hi, __m512i& lo) {
  const __m512i even = _mm512_mul_epu32(a, b);
  const __m512i odd = _mm512_mul_epu32(_mm512_shuffle_epi32(a, _MM_PERM_CDAB), b);
  lo = _mm512_mask_shuffle_epi32(even, 0xaaaa, odd, _MM_PERM_CDAB);  // odd lanes: odd product's low half
  hi = _mm512_mask_shuffle_epi32(odd, 0x5555, even, _MM_PERM_CDAB);  // even lanes: even product's high half
}

// The 4 words of 16 lanes' counters (block + lane) after Philox4x32-10's rounds.
struct Philox16 {
  __m512i c0, c1, c2, c3;
};

inline Philox16 philox16Counters(const scalar::RngStream& s, uint64_t block) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i lo = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(block)), lane);
  const __mmask16 wrapped = _mm512_cmplt_epu32_mask(lo, lane);
  const __m512i hiWord = _mm512_set1_epi32(static_cast<int32_t>(block >> 32));
  return {lo, _mm512_mask_add_epi32(hiWord, wrapped, hiWord, _mm512_set1_epi32(1)),
          _mm512_set1_epi32(static_cast<int32_t>(s.step)), _mm512_set1_epi32(static_cast<int32_t>(s.tensor))};
}

// Rounds firstRound .. 9 of K batches of 16 lanes side by side, from that round's keys k0, k1: a round is
// a chain of dependent steps (multiply, swap, xor, about 8 cycles), and one batch alone left the
// multiplier idle between them (two batches: 3.1 against 3.8 ms per 16M elements here; four against two:
// 3.9-4.1 against 4.5-4.8 ms per 2M calls on the Xeon of 2026-12-04, where a round of two batches still
// waited on its chain; six spill).
template <int K>
inline void philoxRoundsFrom(int firstRound, uint32_t k0, uint32_t k1, Philox16 (&c)[K]) {
  const __m512i m0 = _mm512_set1_epi32(static_cast<int32_t>(kPhiloxM0));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int32_t>(kPhiloxM1));
  for (int round = firstRound; round < 10; ++round) {
    const __m512i key0 = _mm512_set1_epi32(static_cast<int32_t>(k0)), key1 = _mm512_set1_epi32(static_cast<int32_t>(k1));
    for (int b = 0; b < K; ++b) {
      __m512i hi0, lo0, hi1, lo1;
      mulHiLo16(c[b].c0, m0, hi0, lo0);
      mulHiLo16(c[b].c2, m1, hi1, lo1);
      // a ^ b ^ c in one vpternlogd (truth table 0x96)
      c[b] = {_mm512_ternarylogic_epi32(hi1, c[b].c1, key0, 0x96), lo1,
              _mm512_ternarylogic_epi32(hi0, c[b].c3, key1, 0x96), lo0};
    }
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
}

// Philox calls block .. block + 16K - 1 (lane L of batch b: call block + 16b + L), all ten rounds; rounds
// 0-2 from PhiloxSharedRounds where the lanes share the counter's high word, as philox8Rounds.
template <int K>
inline void philoxRounds(const scalar::RngStream& s, uint64_t block, Philox16 (&c)[K]) {
  if (!philoxHighWordShared(block, 16 * K)) {
    for (int b = 0; b < K; ++b) c[b] = philox16Counters(s, block + 16 * static_cast<uint64_t>(b));
    philoxRoundsFrom(0, s.k0, s.k1, c);
    return;
  }
  const PhiloxSharedRounds shared = PhiloxSharedRounds::make(s, static_cast<uint32_t>(block >> 32));
  const __m512i m0 = _mm512_set1_epi32(static_cast<int32_t>(kPhiloxM0));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int32_t>(kPhiloxM1));
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const auto broadcast = [](uint32_t v) { return _mm512_set1_epi32(static_cast<int32_t>(v)); };
  {  // round 0: words 0 and 1 are scalars
    const __m512i xor2 = broadcast(shared.round0Word2);
    for (int b = 0; b < K; ++b) {
      __m512i hi0, lo0;
      mulHiLo16(_mm512_add_epi32(broadcast(static_cast<uint32_t>(block) + 16u * static_cast<uint32_t>(b)), lane), m0, hi0, lo0);
      c[b].c2 = _mm512_xor_si512(hi0, xor2);
      c[b].c3 = lo0;
    }
  }
  {  // round 1: word 0's product is a scalar; the new word 3 (its low half) is too, so it stays out of the lanes
    const __m512i xor0 = broadcast(shared.round1Word0), xor2 = broadcast(shared.round1Word2);
    for (int b = 0; b < K; ++b) {
      __m512i hi1, lo1;
      mulHiLo16(c[b].c2, m1, hi1, lo1);
      c[b].c2 = _mm512_xor_si512(c[b].c3, xor2);
      c[b].c0 = _mm512_xor_si512(hi1, xor0);
      c[b].c1 = lo1;
    }
  }
  {  // round 2: word 3 is a scalar (round 1's), folded into the xor
    const __m512i key0 = broadcast(shared.round2Key0), xor2 = broadcast(shared.round2Word2);
    for (int b = 0; b < K; ++b) {
      __m512i hi0, lo0, hi1, lo1;
      mulHiLo16(c[b].c0, m0, hi0, lo0);
      mulHiLo16(c[b].c2, m1, hi1, lo1);
      c[b] = {_mm512_ternarylogic_epi32(hi1, c[b].c1, key0, 0x96), lo1, _mm512_xor_si512(hi0, xor2), lo0};
    }
  }
  philoxRoundsFrom(3, shared.k0, shared.k1, c);
}

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
template <int K>
inline void philox16InOrder(const scalar::RngStream& s, uint64_t block, uint32_t* out) {
  Philox16 c[K];
  philoxRounds(s, block, c);
  for (int b = 0; b < K; ++b) storeInOrder(c[b], out + 64 * b);
}

#endif

// The words of Philox calls block .. block + calls, in stream order (out[4c + w]: word w of call c), 32
// calls at a time on the widest vector path compiled in (64 at a time first on AVX-512), the rest one by one.
inline void philoxWordsInOrder(const scalar::RngStream& s, uint64_t block, size_t calls, uint32_t* out) {
  size_t c = 0;
#if defined(__AVX512F__)
  for (; c + 64 <= calls; c += 64) philox16InOrder<4>(s, block + c, out + 4 * c);
  for (; c + 32 <= calls; c += 32) philox16InOrder<2>(s, block + c, out + 4 * c);
#elif defined(__AVX2__)
  for (; c + 32 <= calls; c += 32) philox8InOrder<4>(s, block + c, out + 4 * c);
#endif
  for (; c < calls; ++c) {
    const scalar::Philox4 w = s.block(block + c);
    for (int k = 0; k < 4; ++k) out[4 * c + static_cast<size_t>(k)] = w.v[k];
  }
}

}  // namespace gradcomp::cpu
