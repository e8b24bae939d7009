// The AVX-512 twins of cast_kernels.cc's vector loops: 16 lanes a step, the tail through masked loads and
// stores (no scalar loop, so nothing here calls a shared inline function that could be emitted with
// AVX-512 instructions and picked by the linker for other files). Each function carries the target
// attribute instead of the file a -mavx512 flag: the build stays runnable on CPUs without AVX-512, and
// cast_kernels.cc calls these only when cpu_path.h says the CPU has it. Bytes equal the scalar
// reference's (tests/kernels pins every path the CPU runs).
#include "kernels/cpu/cast_kernels_avx512.h"

#include "kernels/cpu/avx512_intrinsics.h"

#if GRADCOMP_CPU_AVX512_KERNELS
namespace gradcomp::cpu::avx512 {
namespace {

GRADCOMP_AVX512 inline __mmask16 tailMask(size_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

// 16 codes to out + i: non-temporal (out + i 32-byte aligned) for outputs far larger than the caches.
GRADCOMP_AVX512 inline void store16(uint16_t* out, size_t i, __m256i codes, bool stream) {
  if (stream)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i), codes);
  else
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), codes);
}

}  // namespace

// fp16(x * prescale), clamped to +-65504 first (the hardware converter's RNE then equals the scalar
// floatToHalfBits, saturation included); |x * prescale| >= 65520 counts as saturated; the input's
// largest |bits| is kept in the same pass for the non-finite check.
GRADCOMP_AVX512 uint64_t encodeFp16(const float* in, size_t n, float prescale, uint16_t* out, bool streamOut,
                                    uint32_t* maxAbsBits) {
  const __m512 scale = _mm512_set1_ps(prescale), hi = _mm512_set1_ps(65504.0f), lo = _mm512_set1_ps(-65504.0f);
  const __m512 overflowAt = _mm512_set1_ps(65520.0f);
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff);
  __m512i maxBits = _mm512_setzero_si512();
  uint64_t saturated = 0;
  // Non-temporal stores need 32-byte-aligned 16-lane halves: stream only when out is aligned.
  const bool stream = streamOut && (reinterpret_cast<uintptr_t>(out) % 32 == 0);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i bits = _mm512_loadu_si512(in + i);
    maxBits = _mm512_max_epu32(maxBits, _mm512_and_si512(bits, absMask));
    __m512 v = _mm512_mul_ps(_mm512_castsi512_ps(bits), scale);
    saturated += static_cast<uint64_t>(__builtin_popcount(
        static_cast<unsigned>(_mm512_cmp_ps_mask(_mm512_abs_ps(v), overflowAt, _CMP_GE_OQ))));
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    store16(out, i, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), stream);
  }
  if (i < n) {
    const __mmask16 m = tailMask(n - i);
    const __m512i bits = _mm512_maskz_loadu_epi32(m, in + i);
    maxBits = _mm512_max_epu32(maxBits, _mm512_and_si512(bits, absMask));
    __m512 v = _mm512_mul_ps(_mm512_castsi512_ps(bits), scale);
    saturated += static_cast<uint64_t>(__builtin_popcount(
        static_cast<unsigned>(_mm512_mask_cmp_ps_mask(m, _mm512_abs_ps(v), overflowAt, _CMP_GE_OQ))));
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  if (maxAbsBits) *maxAbsBits = _mm512_reduce_max_epu32(maxBits);
  return saturated;
}

namespace {

// out[i] (=|+=) widen(in[i]) for a 16-lane widening; overwrite with streamOut uses non-temporal stores
// after a masked head that reaches a 64-byte boundary (outputs far larger than the caches: no
// read-for-ownership of lines about to be overwritten; the codec fences once per thread).
template <typename Widen>
GRADCOMP_AVX512 inline void decode16(const uint16_t* in, size_t n, float* out, bool accumulate, bool streamOut,
                                     Widen widen) {
  size_t i = 0;
  if (accumulate) {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(out + i, _mm512_add_ps(_mm512_loadu_ps(out + i),
                                              widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)))));
  } else if (streamOut) {
    // Elements before the first 64-byte boundary (a float* is 4-byte aligned, so this is exact).
    const size_t toBoundary = ((64 - reinterpret_cast<uintptr_t>(out) % 64) % 64) / sizeof(float);
    const size_t head = toBoundary < n ? toBoundary : n;
    if (head) {
      const __mmask16 m = tailMask(head);
      _mm512_mask_storeu_ps(out, m, widen(_mm256_maskz_loadu_epi16(m, in)));
    }
    for (i = head; i + 16 <= n; i += 16)
      _mm512_stream_ps(out + i, widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  } else {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(out + i, widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  }
  if (i < n) {
    const __mmask16 m = tailMask(n - i);
    __m512 v = widen(_mm256_maskz_loadu_epi16(m, in + i));
    if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, out + i), v);
    _mm512_mask_storeu_ps(out + i, m, v);
  }
}

struct WidenFp16 {
  __m512 scale;
  GRADCOMP_AVX512 __m512 operator()(__m256i h) const { return _mm512_mul_ps(_mm512_cvtph_ps(h), scale); }
};

struct WidenBf16 {
  GRADCOMP_AVX512 __m512 operator()(__m256i h) const {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

}  // namespace

GRADCOMP_AVX512 void decodeFp16(const uint16_t* in, size_t n, float inversePrescale, float* out, bool accumulate,
                                bool streamOut) {
  decode16(in, n, out, accumulate, streamOut, WidenFp16{_mm512_set1_ps(inversePrescale)});
}

namespace {

struct Bf16Lanes {  // an aggregate, set up inside the AVX-512 function (a constructor would lack the target)
  __m512i maxBits;
  __m512i saturated;  // per-lane counts: one masked subtraction a step instead of kmov + popcnt + add
};

// Per step: the high half of each 32-bit lane of the rounded value is the bf16 code, moved down by one
// word permutation (a shift and vpmovdw took three uops where vpermw takes one: with two threads on one
// core's two hyperthreads this loop is bound by its uops, not by memory; docs/notes.md).
// rounded (when given) receives each lane's code in its high half (its low half is not zero): the decoded
// value is rounded & 0xffff0000.
GRADCOMP_AVX512 inline __m256i bf16Lanes(__m512i x, __mmask16 m, Bf16Lanes& acc, __m512i highWords,
                                         __m512i* roundedOut = nullptr) {
  const __m512i ax = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  acc.maxBits = _mm512_max_epu32(acc.maxBits, ax);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
  const __mmask16 over = _mm512_cmpgt_epu32_mask(ax, _mm512_set1_epi32(0x7f7f7fff));  // rounds past the max
  // Finite or Inf among the lanes that round past the max: the saturated ones.
  const __mmask16 counted = _mm512_mask_cmplt_epu32_mask(over & m, ax, _mm512_set1_epi32(0x7f800001));
  acc.saturated = _mm512_mask_sub_epi32(acc.saturated, counted, acc.saturated, _mm512_set1_epi32(-1));
  // (x & sign) | 0x7f7f0000: the largest bf16 of x's sign, in the high half.
  const __m512i satValue =
      _mm512_ternarylogic_epi32(x, _mm512_set1_epi32(static_cast<int>(0x80000000u)), _mm512_set1_epi32(0x7f7f0000), 0xEA);
  const __m512i selected = _mm512_mask_mov_epi32(rounded, over, satValue);
  if (roundedOut) *roundedOut = selected;
  return _mm512_castsi512_si256(_mm512_permutexvar_epi16(highWords, selected));
}

}  // namespace

// bf16 by integer RNE (x + 0x7fff + lsb) >> 16; values that round past the largest bf16 saturate to it
// and count (+-Inf counts too, as in the scalar loop); NaN inputs also take the saturated code (the codec
// rejects them through maxAbsBits before the payload is used).
GRADCOMP_AVX512 uint64_t encodeBf16(const float* in, size_t n, uint16_t* out, bool streamOut, uint32_t* maxAbsBits) {
  // Word 2k + 1 (the high half of lane k) to word k, for the low 16 words.
  const __m512i highWords = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
                                             31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const bool stream = streamOut && (reinterpret_cast<uintptr_t>(out) % 32 == 0);
  __m512i maxBits = _mm512_setzero_si512();
  uint64_t saturated = 0;
  size_t i = 0;
  // The 32-bit lane counts are added up every 2^30 elements, far before one could wrap.
  constexpr size_t kCountSpan = size_t{1} << 30;
  while (i + 16 <= n) {
    Bf16Lanes acc{maxBits, _mm512_setzero_si512()};
    const size_t end = n - i > kCountSpan ? i + kCountSpan : n;
    for (; i + 16 <= end; i += 16) {
      __m512i x = _mm512_loadu_si512(in + i);
      // One load into a register: left to itself the compiler folds the load into each of the four
      // instructions that read x, and four loads per line in flight from memory fill the load queue a
      // quarter as far ahead (on Zen 5, 4.2 ms per 16M values where fp16's single load takes 2.0).
      __asm__("" : "+v"(x));
      store16(out, i, bf16Lanes(x, 0xffff, acc, highWords), stream);
    }
    maxBits = acc.maxBits;
    saturated += static_cast<uint64_t>(_mm512_reduce_add_epi32(acc.saturated));
  }
  if (i < n) {
    const __mmask16 m = tailMask(n - i);
    Bf16Lanes acc{maxBits, _mm512_setzero_si512()};
    _mm256_mask_storeu_epi16(out + i, m, bf16Lanes(_mm512_maskz_loadu_epi32(m, in + i), m, acc, highWords));
    maxBits = acc.maxBits;
    saturated += static_cast<uint64_t>(_mm512_reduce_add_epi32(acc.saturated));
  }
  if (maxAbsBits) *maxAbsBits = _mm512_reduce_max_epu32(maxBits);
  return saturated;
}

GRADCOMP_AVX512 void decodeBf16(const uint16_t* in, size_t n, float* out, bool accumulate, bool streamOut) {
  decode16(in, n, out, accumulate, streamOut, WidenBf16{});
}

namespace {

// The fused error-feedback loops: step(i, lanes, whole) on whole 16-value vectors with plain loads and
// stores, then once on the masked tail (a masked store with a run-time mask on every vector made the
// fp16 loop 7.2 against 5.9 ms per 16M for the unfused encode, decode and subtraction, on Zen 5).
template <typename Step>
GRADCOMP_AVX512 inline void wholeVectorsThenTail(size_t n, Step&& step) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) step(i, static_cast<__mmask16>(0xffff), true);
  if (i < n) step(i, tailMask(n - i), false);
}

GRADCOMP_AVX512 inline void storeCodesAndResidual(uint16_t* out, float* residual, size_t i, __mmask16 m, bool whole,
                                                  __m256i codes, __m512 r) {
  if (whole) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), codes);
    _mm512_storeu_ps(residual + i, r);
  } else {
    _mm256_mask_storeu_epi16(out + i, m, codes);
    _mm512_mask_storeu_ps(residual + i, m, r);
  }
}

}  // namespace

// fp16 with the residual in - fl(code's value x inversePrescale), decodeFp16's product, from the same lanes.
GRADCOMP_AVX512 uint64_t encodeFp16WithResidual(const float* in, size_t n, float prescale, float inversePrescale,
                                                uint16_t* out, float* residual) {
  const __m512 scale = _mm512_set1_ps(prescale), inv = _mm512_set1_ps(inversePrescale);
  const __m512 hi = _mm512_set1_ps(65504.0f), lo = _mm512_set1_ps(-65504.0f), overflowAt = _mm512_set1_ps(65520.0f);
  uint64_t saturated = 0;
  wholeVectorsThenTail(n, [&](size_t i, __mmask16 m, bool whole) GRADCOMP_AVX512_LAMBDA {
    const __m512 x = whole ? _mm512_loadu_ps(in + i) : _mm512_maskz_loadu_ps(m, in + i);
    __m512 v = _mm512_mul_ps(x, scale);
    saturated += static_cast<uint64_t>(__builtin_popcount(
        static_cast<unsigned>(_mm512_mask_cmp_ps_mask(m, _mm512_abs_ps(v), overflowAt, _CMP_GE_OQ))));
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    const __m256i codes = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    storeCodesAndResidual(out, residual, i, m, whole, codes,
                          _mm512_sub_ps(x, _mm512_mul_ps(_mm512_cvtph_ps(codes), inv)));
  });
  return saturated;
}

// bf16 with the residual in - (code << 16), decodeBf16's value, from the rounded lanes.
GRADCOMP_AVX512 uint64_t encodeBf16WithResidual(const float* in, size_t n, uint16_t* out, float* residual) {
  const __m512i highWords = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
                                             31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const __m512i highHalf = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  Bf16Lanes acc{_mm512_setzero_si512(), _mm512_setzero_si512()};
  // An error-feedback tile holds far fewer than 2^30 values per lane count.
  wholeVectorsThenTail(n, [&](size_t i, __mmask16 m, bool whole) GRADCOMP_AVX512_LAMBDA {
    __m512i x = whole ? _mm512_loadu_si512(in + i) : _mm512_maskz_loadu_epi32(m, in + i);
    __asm__("" : "+v"(x));  // one load, as in encodeBf16
    __m512i rounded;
    const __m256i codes = bf16Lanes(x, m, acc, highWords, &rounded);
    storeCodesAndResidual(out, residual, i, m, whole, codes,
                          _mm512_sub_ps(_mm512_castsi512_ps(x), _mm512_castsi512_ps(_mm512_and_si512(rounded, highHalf))));
  });
  return static_cast<uint64_t>(_mm512_reduce_add_epi32(acc.saturated));
}

// Index of the first code whose exponent bits are all ones (Inf/NaN), or n.
GRADCOMP_AVX512 size_t firstAllOnesExponent(const uint16_t* in, size_t n, uint16_t expMask) {
  const __m512i mask = _mm512_set1_epi16(static_cast<short>(expMask));
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i v = _mm512_and_si512(_mm512_loadu_si512(in + i), mask);
    const __mmask32 hit = _mm512_cmpeq_epi16_mask(v, mask);
    if (hit) return i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(hit)));
  }
  if (i < n) {
    const __mmask32 m = static_cast<__mmask32>((uint64_t{1} << (n - i)) - 1);
    const __mmask32 hit = _mm512_mask_cmpeq_epi16_mask(m, _mm512_and_si512(_mm512_maskz_loadu_epi16(m, in + i), mask), mask);
    if (hit) return i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(hit)));
  }
  return n;
}

}  // namespace gradcomp::cpu::avx512
#endif
