// The qsgd and terngrad element rules of kernels/scalar/level_codes.h on 16 lanes (qsgd's sums of squares
// are level_kernels.cc's eight-block AVX2 loop on either path). qsgd's 4-bit codes are packed 128 at a
// time by in-lane packs (avx512_block_steps.h), a short run's by pairing codes within 64-bit lanes and
// narrowing with vpmov*; terngrad's 2-bit codes come from two masks. The target attribute (not a file-wide flag) keeps the build runnable on CPUs without
// AVX-512.
#include "kernels/cpu/level_kernels_avx512.h"

#include "kernels/cpu/avx512_intrinsics.h"
#include "kernels/cpu/avx512_block_steps.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/rounding_fields.h"

#if GRADCOMP_CPU_AVX512_KERNELS

#include <cstring>

namespace gradcomp::cpu::avx512 {

template <int kBits>
GRADCOMP_AVX512 size_t qsgdCodesPackedOfFields(const float* x, size_t n, int bits, float inv, const RoundingFields& u,
                                               uint8_t* packed) {
  const float s = static_cast<float>((1 << (bits - 1)) - 1);
  const __m512 vInv = _mm512_set1_ps(inv), vS = _mm512_set1_ps(s), zero = _mm512_setzero_ps();
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff), signCode = _mm512_set1_epi32(1 << (bits - 1));
  // The codes of x[i .. i + 15], one per 32-bit lane.
  const auto codes = [&](size_t i) GRADCOMP_AVX512_LAMBDA {
    const __m512 v = _mm512_loadu_ps(x + i);
    // level = min(floor(fl(|x| inv) + u), s), the two roundings of the scalar rule
    const __m512 scaled = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), absMask)), vInv);
    // The minimum first, then the floor by the conversion's own rounding (min(floor(a), s) = floor(min(a, s))
    // for an integral s; a vrndscaleps is two micro-ops).
    const __m512 rounded = _mm512_add_ps(scaled, uniformsOfFields16<kBits>(u.bytesAt(i)));
    const __m512i level = _mm512_cvt_roundps_epi32(_mm512_min_ps(rounded, vS),
                                                   _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    // The sign bit only for a nonzero level of a negative x (-0.0 has level 0).
    const __mmask16 negative =
        _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ) & _mm512_cmpgt_epi32_mask(level, _mm512_setzero_si512());
    return _mm512_mask_or_epi32(level, negative, level, signCode);
  };
  size_t i = 0;
  if (bits == 4)  // 128 codes to 64 bytes at a time (storeNibbles8Vectors), then 16 at a time as below
    for (; i + 128 <= n; i += 128) {
      __m512i c[8];
      for (int k = 0; k < 8; ++k) c[k] = codes(i + 16 * static_cast<size_t>(k));
      storeNibbles8Vectors(c, packed + i / 2);
    }
  for (; i + 16 <= n; i += 16) {
    const __m512i code = codes(i);
    if (bits == 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(packed + i), _mm512_cvtepi32_epi8(code));
    } else {  // 4: element 2j + 1's nibble beside element 2j's, then one byte per 64-bit lane
      const __m128i bytes = _mm512_cvtepi64_epi8(_mm512_or_si512(code, _mm512_srli_epi64(code, 28)));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(packed + i / 2), bytes);
    }
  }
  return i;
}

GRADCOMP_AVX512 size_t qsgdCodesPacked(const float* x, size_t n, int bits, float inv, const RoundingFields& u,
                                       uint8_t* packed) {
  return u.bits == 8 ? qsgdCodesPackedOfFields<8>(x, n, bits, inv, u, packed)
                     : qsgdCodesPackedOfFields<16>(x, n, bits, inv, u, packed);
}

template <int kBits>
GRADCOMP_AVX512 size_t ternCodesPackedOfFields(const float* x, size_t n, float inv, const RoundingFields& u,
                                               uint8_t* packed) {
  const __m512 vInv = _mm512_set1_ps(inv);
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff);
  // The codes of x[i .. i + 15] as two masks: kept (u < fl(|x| inv), probability |x| / max) and negative
  // (the sign bit). Code 1 is a kept x with a clear sign bit, code 2 one with it set: their bits (2j and
  // 2j + 1 of the packed word) are interleaved by pdep on the scalar ports. The codes narrowed and paired
  // in vector lanes took eight more vector micro-ops per 16 values, on the two ports the multiply and the
  // compare need (with the maxima on 16 lanes, terngrad encode 9.2-10.0 -> 7.8-8.0 ms per 16M values on
  // the Xeon of 2026-12-04).
  struct Masks {
    __mmask16 keep, negative;
  };
  const auto masks = [&](size_t i) GRADCOMP_AVX512_LAMBDA {
    const __m512i xb = _mm512_loadu_si512(x + i);
    const __m512 scaled = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(xb, absMask)), vInv);
    const __m512 uniforms = uniformsOfFields16<kBits>(u.bytesAt(i));
    return Masks{_mm512_cmp_ps_mask(uniforms, scaled, _CMP_LT_OQ), _mm512_movepi32_mask(xb)};
  };
  size_t i = 0;
  // Two vectors at a time: their masks joined (kunpackw) into 32 bits, so one pair of 64-bit pdeps and one
  // store serve 32 codes (7.8-8.3 -> 7.2-7.8 ms); a short rest 16 at a time.
  for (; i + 32 <= n; i += 32) {
    const Masks m0 = masks(i), m1 = masks(i + 16);
    const uint64_t keep = _cvtmask32_u32(_mm512_kunpackw(m1.keep, m0.keep));
    const uint64_t negative = _cvtmask32_u32(_mm512_kunpackw(m1.negative, m0.negative));
    const uint64_t words = _pdep_u64(keep & ~negative, 0x5555555555555555ull) | _pdep_u64(keep & negative, 0xaaaaaaaaaaaaaaaaull);
    std::memcpy(packed + i / 4, &words, 8);
  }
  for (; i + 16 <= n; i += 16) {
    const Masks m = masks(i);
    const uint32_t keep = m.keep, negative = m.negative;
    const uint32_t word = _pdep_u32(keep & ~negative, 0x55555555u) | _pdep_u32(keep & negative, 0xaaaaaaaau);
    std::memcpy(packed + i / 4, &word, 4);
  }
  return i;
}

GRADCOMP_AVX512 size_t ternCodesPacked(const float* x, size_t n, float inv, const RoundingFields& u, uint8_t* packed) {
  return u.bits == 8 ? ternCodesPackedOfFields<8>(x, n, inv, u, packed)
                     : ternCodesPackedOfFields<16>(x, n, inv, u, packed);
}

GRADCOMP_AVX512 void decodeTernCodesPacked(const uint8_t* packed, size_t n, float maxAbs, float* out,
                                           bool accumulate) {
  const __m512 pos = _mm512_set1_ps(maxAbs), neg = _mm512_set1_ps(-maxAbs);
  const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i three = _mm512_set1_epi32(3), one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2);
  // 16 codes from one 32-bit word: lane j takes bits 2j and 2j + 1.
  const auto values = [&](uint32_t word) GRADCOMP_AVX512_LAMBDA {
    const __m512i c = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(word)), shifts), three);
    const __m512 v = _mm512_mask_mov_ps(_mm512_setzero_ps(), _mm512_cmpeq_epi32_mask(c, one), pos);
    return _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(c, two), neg);
  };
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    uint32_t word;
    std::memcpy(&word, packed + i / 4, 4);
    __m512 v = values(word);
    // The add even for a zero value, as the scalar loop does (-0 + +0 is +0); the sum streams from
    // memory, so its line 4 KiB ahead is asked for.
    if (accumulate) {
      prefetchFloats(out, i + 1024, i + 1040, PrefetchInto::L1);
      v = _mm512_add_ps(_mm512_loadu_ps(out + i), v);
    }
    _mm512_storeu_ps(out + i, v);
  }
  if (i < n) {
    // The last (n - i) codes: their bytes only (a partial last byte's high bits are the next block's or
    // padding; the lanes past n are not stored).
    uint32_t word = 0;
    std::memcpy(&word, packed + i / 4, (n - i + 3) / 4);
    const __mmask16 lanes = static_cast<__mmask16>((1u << (n - i)) - 1u);
    __m512 v = values(word);
    if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, out + i), v);
    _mm512_mask_storeu_ps(out + i, lanes, v);
  }
}

}  // namespace gradcomp::cpu::avx512
#endif
