// Steps the AVX-512 block encoders share (microscaling_kernels_avx512.cc's MX / NVFP4 group encoders,
// block_scale_kernels_avx512.cc's int4 group encoder and the int8 / int4 codes' rounding uniforms,
// level_kernels_avx512.cc's qsgd codes and their rounding uniforms). Included by
// AVX-512 implementation files after avx512_intrinsics.h (never by a header: see there), whose intrinsics
// and target attribute it uses.
#pragma once

#include <cstdint>

#include "kernels/cpu/avx512_build.h"

#if GRADCOMP_CPU_AVX512_KERNELS
#ifndef GRADCOMP_AVX512
#error "include kernels/cpu/avx512_intrinsics.h before kernels/cpu/avx512_block_steps.h"
#endif
namespace gradcomp::cpu::avx512 {

// The stochastic-rounding uniforms (k + 1/2) 2^-kBits of 16 fields k, one per 32-bit lane: exact in fp32
// as fused (k < 2^16).
template <int kBits>
GRADCOMP_AVX512 inline __m512 uniformsOfFieldLanes(__m512i k) {
  static_assert(kBits == 8 || kBits == 16, "rounding fields are 8 or 16 bits");
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(k), _mm512_set1_ps(1.0f / static_cast<float>(1u << kBits)),
                         _mm512_set1_ps(0.5f / static_cast<float>(1u << kBits)));
}

// The uniforms of the 16 kBits-bit fields at p (8 or 16 bits, little-endian: rounding_fields.h).
template <int kBits>
GRADCOMP_AVX512 inline __m512 uniformsOfFields16(const uint8_t* p) {
  if constexpr (kBits == 16)
    return uniformsOfFieldLanes<kBits>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  else
    return uniformsOfFieldLanes<kBits>(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// The same for the lanes set in `lanes` (a tail: the fields past it are not read; those lanes hold
// 2^-(kBits+1)).
template <int kBits>
GRADCOMP_AVX512 inline __m512 uniformsOfFields16(const uint8_t* p, __mmask16 lanes) {
  if constexpr (kBits == 16)
    return uniformsOfFieldLanes<kBits>(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, p)));
  else
    return uniformsOfFieldLanes<kBits>(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(lanes, p)));
}

// The largest lane of each of 16 vectors, lane j of the result from a[j]: a transposing reduction
// (15 maxima and 30 shuffles for 16 blocks, where a horizontal maximum per block costs 8 steps each).
GRADCOMP_AVX512 inline __m512i laneMaxima16(const __m512i* a) {
  __m512i b[8], c[4], d[2];
  // Pairs of vectors: 128-bit lanes 0-1 keep 8 partial maxima of a[2k], lanes 2-3 those of a[2k + 1].
  for (int k = 0; k < 8; ++k)
    b[k] = _mm512_max_epu32(_mm512_shuffle_i32x4(a[2 * k], a[2 * k + 1], 0x44),
                            _mm512_shuffle_i32x4(a[2 * k], a[2 * k + 1], 0xee));
  // Lane L of c[m] holds 4 partial maxima of a[4m + L].
  for (int m = 0; m < 4; ++m)
    c[m] = _mm512_max_epu32(_mm512_shuffle_i32x4(b[2 * m], b[2 * m + 1], 0x88),
                            _mm512_shuffle_i32x4(b[2 * m], b[2 * m + 1], 0xdd));
  // Lane L of d[r]: 2 partial maxima of a[8r + L], then 2 of a[8r + 4 + L].
  for (int r = 0; r < 2; ++r)
    d[r] = _mm512_max_epu32(_mm512_unpacklo_epi64(c[2 * r], c[2 * r + 1]), _mm512_unpackhi_epi64(c[2 * r], c[2 * r + 1]));
  // Lane L, dword k: the maximum of a[L + 4k]; the permutation puts it at position L + 4k.
  const __m512 p = _mm512_castsi512_ps(d[0]), q = _mm512_castsi512_ps(d[1]);
  const __m512i e = _mm512_max_epu32(_mm512_castps_si512(_mm512_shuffle_ps(p, q, 0x88)),
                                     _mm512_castps_si512(_mm512_shuffle_ps(p, q, 0xdd)));
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), e);
}

// 128 consecutive 4-bit codes (8 vectors of 16, values below 16) packed LSB-first into 64 bytes: narrowed
// to bytes by in-lane packs (per 128-bit lane 4 codes of each vector), each pair of neighbours to one
// nibble byte, and a word permutation to the vectors' order. 12 instructions where a pair shift and a
// vpmovqb per vector took 32.
GRADCOMP_AVX512 inline void storeNibbles8Vectors(const __m512i* c, uint8_t* out) {
  const __m512i b0 = _mm512_packus_epi16(_mm512_packus_epi32(c[0], c[1]), _mm512_packus_epi32(c[2], c[3]));
  const __m512i b1 = _mm512_packus_epi16(_mm512_packus_epi32(c[4], c[5]), _mm512_packus_epi32(c[6], c[7]));
  const __m512i low = _mm512_set1_epi16(0xff);  // (A | B) & C
  const __m512i n0 = _mm512_ternarylogic_epi32(b0, _mm512_srli_epi16(b0, 4), low, 0xa8);
  const __m512i n1 = _mm512_ternarylogic_epi32(b1, _mm512_srli_epi16(b1, 4), low, 0xa8);
  // Word 8L + k is vector k's lane L (4 codes); it goes to 4k + L.
  const __m512i order = _mm512_set_epi16(31, 23, 15, 7, 30, 22, 14, 6, 29, 21, 13, 5, 28, 20, 12, 4, 27, 19, 11, 3, 26,
                                         18, 10, 2, 25, 17, 9, 1, 24, 16, 8, 0);
  _mm512_storeu_si512(out, _mm512_permutexvar_epi16(order, _mm512_packus_epi16(n0, n1)));
}

}  // namespace gradcomp::cpu::avx512
#endif
