// Steps the AVX-512 block encoders share (microscaling_kernels_avx512.cc's MX / NVFP4 group encoders,
// block_scale_kernels_avx512.cc's int4 group encoder). Included by AVX-512 implementation files after
// avx512_intrinsics.h (never by a header: see there), whose intrinsics and target attribute it uses.
#pragma once

#include "kernels/cpu/avx512_build.h"

#if GRADCOMP_CPU_AVX512_KERNELS
#ifndef GRADCOMP_AVX512
#error "include kernels/cpu/avx512_intrinsics.h before kernels/cpu/avx512_block_steps.h"
#endif
namespace gradcomp::cpu::avx512 {

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

}  // namespace gradcomp::cpu::avx512
#endif
