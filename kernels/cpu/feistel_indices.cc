#include "kernels/cpu/feistel_indices.h"

#include "kernels/cpu/avx512_intrinsics.h"
#include "kernels/cpu/cpu_path.h"

#ifdef __AVX2__
#include <immintrin.h>
#endif

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

#ifdef __AVX2__
// The same 32-bit lanes, 8 at a time, for CPUs without AVX-512 (random-k's encode and decode spend most
// of their time here: four rounds of two multiplies per coordinate).
inline __m256i mix32x8(__m256i x) {  // scalar::mix32 on 8 lanes
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int32_t>(0x85ebca6bu)));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 13));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int32_t>(0xc2b2ae35u)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

inline __m256i permuteDomain8(__m256i x, const scalar::FeistelPermutation& p) {
  const __m256i mask = _mm256_set1_epi32(static_cast<int32_t>((1u << p.halfBits) - 1u));
  const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(p.halfBits));
  __m256i left = _mm256_srl_epi32(x, shift), right = _mm256_and_si256(x, mask);
  for (int r = 0; r < 4; ++r) {
    const __m256i f =
        _mm256_and_si256(mix32x8(_mm256_xor_si256(right, _mm256_set1_epi32(static_cast<int32_t>(p.keys[r])))), mask);
    const __m256i next = _mm256_xor_si256(left, f);
    left = right;
    right = next;
  }
  return _mm256_or_si256(_mm256_sll_epi32(left, shift), right);
}

// Lanes x > last, unsigned (AVX2 compares are signed: flip the sign bits of both sides).
inline __m256i aboveUnsigned(__m256i x, __m256i lastFlipped) {
  return _mm256_cmpgt_epi32(_mm256_xor_si256(x, _mm256_set1_epi32(static_cast<int32_t>(0x80000000u))), lastFlipped);
}

size_t feistelIndicesAvx2(const scalar::FeistelPermutation& p, uint64_t first, size_t count, uint64_t* out) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lastFlipped =
      _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(p.n - 1) ^ 0x80000000u));
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256i x = permuteDomain8(_mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(first + i)), lane), p);
    // Cycle-walk the lanes that left [0, n), each until it is back, as the scalar loop does.
    for (__m256i outside = aboveUnsigned(x, lastFlipped); !_mm256_testz_si256(outside, outside);
         outside = aboveUnsigned(x, lastFlipped))
      x = _mm256_blendv_epi8(x, permuteDomain8(x, p), outside);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_cvtepu32_epi64(_mm256_castsi256_si128(x)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 4), _mm256_cvtepu32_epi64(_mm256_extracti128_si256(x, 1)));
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
#ifdef __AVX2__
  if (i == 0 && activeCpuPath() >= CpuPath::Avx2 && perm.halfBits <= 16 && first + count <= (uint64_t{1} << 32))
    i = feistelIndicesAvx2(perm, first, count, out);
#endif
  for (; i < count; ++i) out[i] = perm(first + i);
}

}  // namespace gradcomp::cpu
