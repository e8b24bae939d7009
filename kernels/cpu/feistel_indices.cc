#include "kernels/cpu/feistel_indices.h"

#include "kernels/cpu/avx512_intrinsics.h"
#include "kernels/cpu/cpu_path.h"

namespace gradcomp::cpu {
namespace {

#if GRADCOMP_CPU_AVX512_KERNELS
GRADCOMP_AVX512 inline __m512i mix32x16(__m512i x) {  // scalar::mix32 on 16 lanes
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int32_t>(0x85ebca6bu)));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 13));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int32_t>(0xc2b2ae35u)));
  return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

// permuteDomain on 16 lanes for halfBits <= 16 (a domain of at most 2^32: every value fits 32 bits, and
// the round function's `right >> 32` term is 0).
GRADCOMP_AVX512 inline __m512i permuteDomain16(__m512i x, const scalar::FeistelPermutation& p) {
  const __m512i mask = _mm512_set1_epi32(static_cast<int32_t>((1u << p.halfBits) - 1u));
  const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(p.halfBits));
  __m512i left = _mm512_srl_epi32(x, shift), right = _mm512_and_si512(x, mask);
  for (int r = 0; r < 4; ++r) {
    const __m512i f = _mm512_and_si512(mix32x16(_mm512_xor_si512(right, _mm512_set1_epi32(static_cast<int32_t>(p.keys[r])))), mask);
    const __m512i next = _mm512_xor_si512(left, f);
    left = right;
    right = next;
  }
  return _mm512_or_si512(_mm512_sll_epi32(left, shift), right);
}

GRADCOMP_AVX512 size_t feistelIndicesAvx512(const scalar::FeistelPermutation& p, uint64_t first, size_t count,
                                            uint64_t* out) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  // n - 1 as the unsigned bound (n >= 1 whenever there is a coordinate to compute; n <= 2^32 here).
  const __m512i last = _mm512_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(p.n - 1)));
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512i x = permuteDomain16(_mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(first + i)), lane), p);
    // Cycle-walk the lanes that left [0, n), each until it is back (expected < 4 steps, as the scalar).
    for (__mmask16 out_of_range = _mm512_cmpgt_epu32_mask(x, last); out_of_range;
         out_of_range = _mm512_cmpgt_epu32_mask(x, last))
      x = _mm512_mask_mov_epi32(x, out_of_range, permuteDomain16(x, p));
    _mm512_storeu_si512(out + i, _mm512_cvtepu32_epi64(_mm512_castsi512_si256(x)));
    _mm512_storeu_si512(out + i + 8, _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(x, 1)));
  }
  return i;
}
#endif

}  // namespace

void feistelIndices(const scalar::FeistelPermutation& perm, uint64_t first, size_t count, uint64_t* out) {
  size_t i = 0;
#if GRADCOMP_CPU_AVX512_KERNELS
  // 32-bit lanes: the domain 4^halfBits and every counter first + i below 2^32.
  if (activeCpuPath() == CpuPath::Avx512 && perm.halfBits <= 16 && first + count <= (uint64_t{1} << 32))
    i = feistelIndicesAvx512(perm, first, count, out);
#endif
  for (; i < count; ++i) out[i] = perm(first + i);
}

}  // namespace gradcomp::cpu
