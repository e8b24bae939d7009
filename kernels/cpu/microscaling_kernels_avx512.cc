// The element conversion is microscaling_kernels.cc's branch-free ElementLane on 16 lanes; the codes
// are packed LSB-first without leaving registers: 8-bit by vpmovdb, 4-bit by pairing the lanes of each
// 64-bit lane and vpmovqb, 6-bit by pairing twice (12, then 24 bits) and a byte shuffle to 12 bytes.
// The target attribute (not a file-wide flag) keeps the build runnable on CPUs without AVX-512.
#include "kernels/cpu/microscaling_kernels_avx512.h"

#include "kernels/cpu/avx512_intrinsics.h"
#include "kernels/cpu/avx512_block_steps.h"
#include "kernels/cpu/e2m1_quarter_codes.h"
#include "kernels/cpu/prefetch.h"

#include <algorithm>
#include <type_traits>

#if GRADCOMP_CPU_AVX512_KERNELS
namespace gradcomp::cpu::avx512 {
namespace {

using namespace scalar;

// floatToElement's steps for one format, as 16-lane constants.
struct ElementLanes {
  __m512i absMask, rebias, magicBits, minNormal, maxBits, maxCode, overflow, one;
  __m512 magic;
  int shift, signShift, bits;
};

GRADCOMP_AVX512 ElementLanes lanesFor(const ElementSpec& s) {
  ElementLanes l;
  l.absMask = _mm512_set1_epi32(0x7fffffff);
  l.rebias = _mm512_set1_epi32(
      static_cast<int>((static_cast<uint32_t>(s.bias - 127) << 23) + ((1u << (22 - s.mantBits)) - 1u)));
  l.magicBits = _mm512_set1_epi32(static_cast<int>(floatBits(s.subnormalMagic)));
  l.minNormal = _mm512_set1_epi32(static_cast<int>(s.minNormalBits));
  l.maxBits = _mm512_set1_epi32(static_cast<int>(floatBits(s.maxValue)));
  l.maxCode = _mm512_set1_epi32(s.maxCode);
  l.overflow = _mm512_set1_epi32(static_cast<int>(elementOverflowBits(s)));
  l.one = _mm512_set1_epi32(1);
  l.magic = _mm512_set1_ps(s.subnormalMagic);
  l.shift = 23 - s.mantBits;
  l.signShift = 32 - s.bits;  // bit 31 down to the code's top bit
  l.bits = s.bits;
  return l;
}

// The codes of 16 scaled values (one per 32-bit lane); saturatedLanes counts the lanes at or past the
// overflow midpoint.
GRADCOMP_AVX512 inline __m512i elementCodesUncounted(__m512 v, const ElementLanes& l) {
  const __m512i xb = _mm512_castps_si512(v);
  const __m512i a = _mm512_and_si512(xb, l.absMask);
  const __m512i sign = _mm512_srli_epi32(_mm512_andnot_si512(l.absMask, xb), static_cast<unsigned>(l.signShift));
  const __m512i sub =
      _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), l.magic)), l.magicBits);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, static_cast<unsigned>(l.shift)), l.one);
  const __m512i nor =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(a, l.rebias), odd), static_cast<unsigned>(l.shift));
  __m512i code = _mm512_mask_mov_epi32(nor, _mm512_cmplt_epu32_mask(a, l.minNormal), sub);
  code = _mm512_mask_mov_epi32(code, _mm512_cmpge_epu32_mask(a, l.maxBits), l.maxCode);
  code = _mm512_min_epu32(code, l.maxCode);
  return _mm512_or_si512(sign, code);
}

GRADCOMP_AVX512 inline uint32_t saturatedLanes(__m512 v, const ElementLanes& l, __mmask16 valid) {
  const __m512i a = _mm512_and_si512(_mm512_castps_si512(v), l.absMask);
  return static_cast<uint32_t>(__builtin_popcount(_mm512_mask_cmpge_epu32_mask(valid, a, l.overflow)));
}

GRADCOMP_AVX512 inline __m512i elementCodes(__m512 v, const ElementLanes& l, __mmask16 valid, uint32_t& sat) {
  sat += saturatedLanes(v, l, valid);
  return elementCodesUncounted(v, l);
}

// elementCodesUncounted for one format known at compile time: its shifts as immediates (a shift by a
// register count is two micro-ops on Intel cores), and without the test of a >= the largest value: the
// rounding is monotonic in a, so every such a rounds to the largest code or above it, and the final
// minimum caps it.
template <int kMantBits, int kBits>
GRADCOMP_AVX512 inline __m512i elementCodesOf(__m512 v, const ElementLanes& l) {
  const __m512i xb = _mm512_castps_si512(v);
  const __m512i a = _mm512_and_si512(xb, l.absMask);
  const __m512i sign = _mm512_srli_epi32(_mm512_andnot_si512(l.absMask, xb), 32 - kBits);
  const __m512i sub =
      _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), l.magic)), l.magicBits);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 23 - kMantBits), l.one);
  const __m512i nor = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(a, l.rebias), odd), 23 - kMantBits);
  const __m512i code = _mm512_mask_mov_epi32(nor, _mm512_cmplt_epu32_mask(a, l.minNormal), sub);
  return _mm512_or_si512(sign, _mm512_min_epu32(code, l.maxCode));
}

// 16 codes of `bits` bits packed LSB-first into the low bytes of a register (16, 12 or 8 of them).
GRADCOMP_AVX512 inline __m128i packCodes(__m512i c, int bits) {
  if (bits == 8) return _mm512_cvtepi32_epi8(c);
  // 4 bits: in each 64-bit lane the odd element's code (bits 32..35) moves beside the even one's (4..7).
  if (bits == 4) return _mm512_cvtepi64_epi8(_mm512_or_si512(c, _mm512_srli_epi64(c, 28)));
  // 6 bits: pairs into 12 bits per 64-bit lane, narrowed to 32; pairs of those into 24 bits, narrowed;
  // then the three low bytes of each 32-bit lane.
  const __m256i p12 = _mm512_cvtepi64_epi32(_mm512_or_si512(c, _mm512_srli_epi64(c, 26)));
  const __m128i p24 = _mm256_cvtepi64_epi32(_mm256_or_si256(p12, _mm256_srli_epi64(p12, 20)));
  return _mm_shuffle_epi8(p24, _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
}

// Stores the packed bytes of 16 codes: plain stores of exactly 16 x bits / 8 bytes for a whole group
// (a masked or narrowing store to memory is several times slower on some cores), a byte mask for the
// first m codes of a last partial group.
GRADCOMP_AVX512 inline void storeCodes(__m128i packed, int bits, uint8_t* out, size_t m) {
  if (m == 16) {
    if (bits == 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), packed);
    } else {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out), packed);
      if (bits == 6) {
        const uint32_t high = static_cast<uint32_t>(_mm_extract_epi32(packed, 2));
        __builtin_memcpy(out + 8, &high, 4);
      }
    }
    return;
  }
  const size_t bytes = (m * static_cast<size_t>(bits) + 7) / 8;
  _mm_mask_storeu_epi8(out, static_cast<__mmask16>((1u << bytes) - 1u), packed);
}

GRADCOMP_AVX512 inline uint32_t blockMaxBits(const float* x, size_t len) {
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff);
  __m512i acc = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + 16 <= len; i += 16) acc = _mm512_max_epu32(acc, _mm512_and_si512(_mm512_loadu_si512(x + i), absMask));
  if (i < len) {
    const __mmask16 m = static_cast<__mmask16>((1u << (len - i)) - 1u);
    acc = _mm512_max_epu32(acc, _mm512_and_si512(_mm512_maskz_loadu_epi32(m, x + i), absMask));
  }
  return _mm512_reduce_max_epu32(acc);
}

// elementToFloat on 16 lanes for the finite codes (the validators reject the others before any decode):
// sign | exponent rebiased | mantissa shifted up, or mantissa x the subnormal step for exponent 0.
struct ValueLanes {
  __m512i signBit, expMask, mantMask, rebias;
  __m512 step;
  int signShift, mantBits;
};

GRADCOMP_AVX512 ValueLanes valueLanesFor(const ElementSpec& s) {
  ValueLanes v;
  v.signBit = _mm512_set1_epi32(1 << (s.bits - 1));
  v.expMask = _mm512_set1_epi32((1 << (s.bits - 1 - s.mantBits)) - 1);
  v.mantMask = _mm512_set1_epi32((1 << s.mantBits) - 1);
  v.rebias = _mm512_set1_epi32((127 - s.bias) << 23);
  v.step = _mm512_set1_ps(s.subnormalStep);
  v.signShift = 32 - s.bits;
  v.mantBits = s.mantBits;
  return v;
}

GRADCOMP_AVX512 inline __m512 elementValues(__m512i c, const ValueLanes& v) {
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, v.signBit), static_cast<unsigned>(v.signShift));
  const __m512i e = _mm512_and_si512(_mm512_srli_epi32(c, static_cast<unsigned>(v.mantBits)), v.expMask);
  const __m512i mant = _mm512_and_si512(c, v.mantMask);
  const __m512i normal = _mm512_or_si512(_mm512_add_epi32(_mm512_slli_epi32(e, 23), v.rebias),
                                         _mm512_slli_epi32(mant, static_cast<unsigned>(23 - v.mantBits)));
  const __m512i sub = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(mant), v.step));
  const __mmask16 subnormal = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_mask_mov_epi32(normal, subnormal, sub), sign));
}

constexpr size_t kGroup = 16;  // blocks per group of encodeBlocks

// The blocks of x: per group of up to kGroup blocks, `scalesOf(maxBits, count, codes, factors, divide)`
// turns the blocks' largest magnitudes (fp32 bits, all finite) into their scale codes and factors; the
// element codes of x x factor (or x / factor) are packed at element offset b0. Returns the saturations.
// The blocks go 16 at a time in three phases (their maxima, their scales, their codes), so that one
// block's chain of dependent steps (a horizontal maximum, the scale rule, a broadcast) overlaps the next
// blocks' instead of stalling the loop: a 16-element NVFP4 block is otherwise latency-bound.
// With residual given, also residual = x - value(code) x decodeFactorOf(scale code), the decoder's product
// (decodeBlocks), from the codes in registers: error feedback's step without a decode pass.
// kResidual is a template parameter so that the plain encode carries no test of it (3-5 % slower with a
// run-time branch in the code loop).
template <bool kResidual, typename ScalesOf, typename DecodeFactorOf>
GRADCOMP_AVX512 uint64_t encodeBlocks(const float* x, size_t n, size_t blockSize, const ElementLanes& l,
                                      uint8_t* packed, uint8_t* scaleCodes, uint64_t* firstBad, ScalesOf&& scalesOf,
                                      float* residual, const ValueLanes& values, DecodeFactorOf&& decodeFactorOf) {
  uint64_t saturated = 0;
  uint32_t maxBits[kGroup];
  float factors[kGroup];
  bool divide = false;
  const size_t blocks = (n + blockSize - 1) / blockSize;
  for (size_t g0 = 0; g0 < blocks; g0 += kGroup) {
    const size_t count = blocks - g0 < kGroup ? blocks - g0 : kGroup;
    for (size_t j = 0; j < count; ++j) {
      const size_t b0 = (g0 + j) * blockSize;
      maxBits[j] = blockMaxBits(x + b0, blockSize < n - b0 ? blockSize : n - b0);
    }
    for (size_t j = 0; j < count; ++j) {
      if (!isFiniteBits(maxBits[j])) {
        const size_t b0 = (g0 + j) * blockSize;
        if (firstBad) *firstBad = b0 + firstNonFiniteIndex(x + b0, blockSize < n - b0 ? blockSize : n - b0);
        return saturated;
      }
    }
    scalesOf(maxBits, count, scaleCodes + g0, factors, divide);
    uint32_t sat = 0;
    for (size_t j = 0; j < count; ++j) {
      const size_t b0 = (g0 + j) * blockSize, len = blockSize < n - b0 ? blockSize : n - b0;
      const __m512 f = _mm512_set1_ps(factors[j]);
      const __m512 decodeFactor = _mm512_set1_ps(kResidual ? decodeFactorOf(scaleCodes[g0 + j]) : 0.0f);
      for (size_t i = 0; i < len; i += 16) {
        // The input 4 KiB ahead, one line per vector of codes: the maxima phase is a group's first read
        // from memory, and where memory is slow (a 64 MiB memcpy of 7-11 ms on the Xeon of 2026-12-04)
        // the hardware prefetchers alone left mxfp8 encode at 1.6-1.8x memcpy. Spread over this phase's
        // arithmetic, not asked for in one burst per group (which stalled on the line fill buffers).
        // Error feedback's x is a g + e tile in L1: nothing ahead of it to ask for.
        if constexpr (!kResidual) prefetchFloats(x, b0 + i + 1024, b0 + i + 1040, PrefetchInto::L1);
        const size_t m = len - i >= 16 ? 16 : len - i;
        const __mmask16 valid = static_cast<__mmask16>((1u << m) - 1u);
        const __m512 xv = m == 16 ? _mm512_loadu_ps(x + b0 + i) : _mm512_maskz_loadu_ps(valid, x + b0 + i);
        // factor 0 (an NVFP4 block below E4M3's smallest scale): every code 0, as the scalar path writes.
        const __m512i c = factors[j] == 0.0f
                              ? _mm512_setzero_si512()
                              : elementCodes(divide ? _mm512_div_ps(xv, f) : _mm512_mul_ps(xv, f), l, valid, sat);
        storeCodes(packCodes(c, l.bits), l.bits, packed + (b0 + i) * static_cast<size_t>(l.bits) / 8, m);
        if constexpr (kResidual) {
          const __m512 r = _mm512_sub_ps(xv, _mm512_mul_ps(elementValues(c, values), decodeFactor));
          // A masked store only for a short last chunk: on Zen 5 one per vector cost fp16's fused
          // error-feedback loop 7.2 against 4.85 ms per 16M.
          if (m == 16)
            _mm512_storeu_ps(residual + b0 + i, r);
          else
            _mm512_mask_storeu_ps(residual + b0 + i, valid, r);
        }
      }
    }
    saturated += sat;
  }
  return saturated;
}

// ---------------------------------------------------------------- decode

// 16 codes of `bits` bits from LSB-first packed bytes (the first m of them; bytes past them are not read),
// one per 32-bit lane: the inverse of packCodes.
GRADCOMP_AVX512 inline __m512i unpackCodes(const uint8_t* in, int bits, size_t m) {
  const size_t bytes = (m * static_cast<size_t>(bits) + 7) / 8;
  const __m128i raw = _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << bytes) - 1u), in);
  if (bits == 8) return _mm512_cvtepu8_epi32(raw);
  if (bits == 4) {
    // Byte j to 64-bit lane j: its low nibble is element 2j, its high nibble (moved to bit 32) 2j + 1.
    const __m512i q = _mm512_cvtepu8_epi64(raw);
    return _mm512_or_si512(_mm512_and_si512(q, _mm512_set1_epi64(0xf)),
                           _mm512_slli_epi64(_mm512_and_si512(q, _mm512_set1_epi64(0xf0)), 28));
  }
  // 6 bits: each 3 bytes (24 bits, 4 codes) into a 32-bit lane, that lane to 4 lanes, each shifted to
  // its code.
  const __m128i p24 = _mm_shuffle_epi8(raw, _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1));
  const __m512i lanes = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i spread = _mm512_permutexvar_epi32(lanes, _mm512_castsi128_si512(p24));
  const __m512i shifts = _mm512_setr_epi32(0, 6, 12, 18, 0, 6, 12, 18, 0, 6, 12, 18, 0, 6, 12, 18);
  return _mm512_and_si512(_mm512_srlv_epi32(spread, shifts), _mm512_set1_epi32(63));
}

// out (=|+=) value(code) x factorOf(block) over the blocks: one product per element, as decodeScaled.
template <typename FactorOf>
GRADCOMP_AVX512 void decodeBlocks(const uint8_t* packed, size_t n, size_t blockSize, int bits, const ValueLanes& v,
                                  float* out, bool accumulate, FactorOf&& factorOf) {
  for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) {
    const size_t len = blockSize < n - b0 ? blockSize : n - b0;
    const __m512 f = _mm512_set1_ps(factorOf(block));
    for (size_t i = b0; i < b0 + len; i += 16) {
      const size_t m = b0 + len - i < 16 ? b0 + len - i : 16;
      const __mmask16 valid = static_cast<__mmask16>((1u << m) - 1u);
      __m512 y = _mm512_mul_ps(elementValues(unpackCodes(packed + i * static_cast<size_t>(bits) / 8, bits, m), v), f);
      if (accumulate) {
        // The sum streams from memory: its line 4 KiB ahead, one per vector.
        prefetchFloats(out, i + 1024, i + 1040, PrefetchInto::L1);
        y = _mm512_add_ps(_mm512_maskz_loadu_ps(valid, out + i), y);
      }
      if (m == 16) {
        _mm512_storeu_ps(out + i, y);
      } else {
        _mm512_mask_storeu_ps(out + i, valid, y);
      }
    }
  }
}

// NVFP4's scale rule on 16 blocks at once, in the lanes of the element conversion with E4M3's constants:
// code = E4M3(amax / fl(6 t)) (nvfp4BlockScaleCode), factor = fl(E4M3 value x t) (nvfp4BlockFactor).
// Per block in scalar code it cost more than the block's 16 elements.
struct Nvfp4ScaleLanes {
  ElementLanes codeLanes;
  ValueLanes valueLanes;
  __m512 sixT, t;
  __m512 reciprocalSixT;  // fl(1 / fl(6 t)), for nvfp4ScaleCodesByProduct where reciprocalUsable
  bool reciprocalUsable;
};

// withReciprocal: also fl(1 / fl(6 t)) for nvfp4ScaleCodesByProduct (a scalar division, whose latency
// heads every call's chain: error feedback's calls, one group each, skip it).
GRADCOMP_AVX512 Nvfp4ScaleLanes nvfp4ScaleLanesFor(float t, bool withReciprocal = false) {
  const ElementSpec e4m3 = elementSpec(ElementFormat::E4M3);
  const float sixT = mulRn(kNvfp4ElementMax, t), reciprocal = withReciprocal ? divRn(1.0f, sixT) : 0.0f;
  // A normal reciprocal of a normal 6 t: both round once, relative 2^-24.
  const auto positiveNormal = [](float v) { return floatBits(v) - 0x00800000u < 0x7f000000u; };
  const bool usable = withReciprocal && positiveNormal(sixT) && positiveNormal(reciprocal);
  return {lanesFor(e4m3), valueLanesFor(e4m3), _mm512_set1_ps(sixT), _mm512_set1_ps(t), _mm512_set1_ps(reciprocal), usable};
}

// The 16 blocks' scale codes (one per 32-bit lane) and, in factors, their factors.
GRADCOMP_AVX512 inline __m512i nvfp4ScaleCodes(__m512 amax, const Nvfp4ScaleLanes& s, __mmask16 m, __m512& factors) {
  uint32_t unused = 0;  // a scale's saturation is not an element's
  const __m512i c = elementCodes(_mm512_div_ps(amax, s.sixT), s.codeLanes, m, unused);
  factors = _mm512_mul_ps(elementValues(c, s.valueLanes), s.t);
  return c;
}

// nvfp4ScaleCodes with the product amax x fl(1 / fl(6 t)) in place of the quotient where that gives the
// same codes: an E4M3 code (RNE, saturating at 448) changes only at a value with at most four fraction
// bits (a midpoint between neighbours: 1.xxx1b x 2^e in the normal range, (2m + 1) x 2^-10 below it, 432
// above which every value saturates to 448), so it is the same for all fp32 numbers strictly inside a
// step of 2^19 ulps; the product is within 2 ulps of the quotient (the reciprocal and the product each
// round once), so where it lies 4 or more ulps inside a step, both do and neither is its start.
// Otherwise (a lane within 3 ulps of a step's start, about 7 in 2^19 of random maxima; an overflowing
// product, at Inf's own step start) the 16 scales are divided. Products below
// 2^-12 are tested as a value far inside its step: there both round to code 0 (below 2^-10, whose tie
// goes to 0), and zero maxima (all-zero blocks of a sparse gradient) sit at a start. vdivps, 16 lanes per
// 10 or more cycles on Intel cores, was a fifth of the group encoder's arithmetic with its two siblings.
GRADCOMP_AVX512 inline __m512i nvfp4ScaleCodesByProduct(__m512 amax, const Nvfp4ScaleLanes& s, __m512& factors) {
  if (s.reciprocalUsable) {
    const __m512 scaled = _mm512_mul_ps(amax, s.reciprocalSixT);
    const __m512i floor = _mm512_set1_epi32(static_cast<int>(floatBits(0x1p-12f) | 0x40000u));
    const __m512i tested = _mm512_max_epu32(_mm512_castps_si512(scaled), floor);
    const __m512i offset = _mm512_and_si512(_mm512_add_epi32(tested, _mm512_set1_epi32(3)), _mm512_set1_epi32(0x7ffff));
    if (!_mm512_cmple_epu32_mask(offset, _mm512_set1_epi32(6))) {
      uint32_t unused = 0;
      const __m512i c = elementCodes(scaled, s.codeLanes, 0xffff, unused);
      factors = _mm512_mul_ps(elementValues(c, s.valueLanes), s.t);
      return c;
    }
  }
  return nvfp4ScaleCodes(amax, s, 0xffff, factors);
}

// 1 / d of positive normal d in [2^-125, 2^125), within 0.57 ulp: the 14-bit estimate (vrcp14ps, relative
// error below 2^-14) and one Newton step by FMA, r + r (1 - d r), whose error is the estimate's squared
// (2^-28, a sixteenth of an ulp) plus its own rounding. Three micro-ops where vdivps is a 10-cycle or longer occupation of
// its port.
GRADCOMP_AVX512 inline __m512 reciprocalsOf(__m512 d) {
  const __m512 r = _mm512_rcp14_ps(d);
  return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0f)), r);
}

// Makes v opaque to the compiler, so that it keeps v in a register where it would otherwise build the
// constant anew (a move and a broadcast) at each use inside a loop.
__attribute__((always_inline)) GRADCOMP_AVX512 inline void keepInRegister(__m512i& v) { __asm__("" : "+v"(v)); }
template <typename... V>
__attribute__((always_inline)) GRADCOMP_AVX512 inline void keepInRegisters(V&... v) {
  (keepInRegister(v), ...);
}

// E2M1 by table (e2m1_quarter_codes.h): the entry of a magnitude's quarter-binade key, one less at an
// edge whose flag (bit 3) is set.
struct E2M1Table {
  __m512i lo, hi;                    // entries 0-15, 16-31
  __m512i keyBase, keyMax, signBit;  // the key's constants, and bit 3 (the code's sign)
};

GRADCOMP_AVX512 E2M1Table e2m1TableFor() {
  const uint32_t* e = e2m1QuarterEntries();
  return {_mm512_loadu_si512(e), _mm512_loadu_si512(e + 16), _mm512_set1_epi32(static_cast<int>(kE2M1KeyBase)),
          _mm512_set1_epi32(static_cast<int>(kE2M1Keys - 1)), _mm512_set1_epi32(8)};
}

// The table entries of 16 magnitudes a (fp32 bits, finite).
GRADCOMP_AVX512 inline __m512i e2m1Entries(__m512i a, const E2M1Table& t) {
  // The key: the top bits less the base, floored at 0 by the unsigned saturating 16-bit subtraction (the
  // shifted bits fit the low half of each lane), capped at 31.
  const __m512i key = _mm512_min_epu16(_mm512_subs_epu16(_mm512_srli_epi32(a, 21), t.keyBase), t.keyMax);
  return _mm512_permutex2var_epi32(t.lo, key, t.hi);
}

// Bits 0-2 of code, bit 3 from the sign bit of xb: one ternary-logic select, C ? A : B.
GRADCOMP_AVX512 inline __m512i withSigns(__m512i code, __m512i xb, const E2M1Table& t) {
  return _mm512_ternarylogic_epi32(_mm512_srli_epi32(xb, 28), code, t.signBit, 0xe4);
}

// E2M1 codes of 16 magnitudes a (fp32 bits, finite), with the sign bits of xb (bit 31 to the code's bit 3).
GRADCOMP_AVX512 inline __m512i e2m1Codes(__m512i a, __m512i xb, const E2M1Table& t) {
  const __m512i entry = e2m1Entries(a, t);
  // An edge exactly: the mantissa bits below the key's are zero and the entry is flagged.
  const __mmask16 exact = _mm512_testn_epi32_mask(a, _mm512_set1_epi32(0x1fffff));
  const __mmask16 tie = _mm512_mask_test_epi32_mask(exact, entry, _mm512_set1_epi32(8));
  return withSigns(_mm512_mask_sub_epi32(entry, tie, entry, _mm512_set1_epi32(1)), xb, t);
}

// e2m1Codes of magnitudes none of which is a quarter's start (an edge): the entries as they are, their
// flag bit replaced by the sign.
GRADCOMP_AVX512 inline __m512i e2m1CodesOffEdges(__m512i a, __m512i xb, const E2M1Table& t) {
  return withSigns(e2m1Entries(a, t), xb, t);
}

// NVFP4 with its standard 16-element blocks, 16 blocks (256 elements) to a group, up to kScaleGroups
// groups at a time in two phases: first every group's scales (the maxima by one transposing reduction,
// or loaded where the tensor's first pass kept them: maxBits, one per block; the 16 scale codes, factors
// and reciprocals in one register), then every group's codes (8 blocks packed together). A group's
// scales are a chain of dependent steps (a reduction, a conversion, a reciprocal) that, with its codes
// right behind it, left the loop waiting on each group's chain; in phases the chains of the next groups
// overlap each other. Stops before a last partial group or a group whose maximum is not finite; returns
// the elements encoded. With kResidual, residual = x - value(code) x factor, the decoder's product, from
// the codes in registers.
template <bool kResidual>
GRADCOMP_AVX512 size_t encodeNvfp4Groups(const float* x, size_t n, float t, const uint32_t* maxBits, uint8_t* packed,
                                         uint8_t* scaleCodes, uint64_t& saturated, float* residual) {
  constexpr size_t kGroupValues = 256, kScaleGroups = 8, kAhead = kGroupValues * kScaleGroups;
  const Nvfp4ScaleLanes scales = nvfp4ScaleLanesFor(t, !kResidual);
  const ElementLanes l = lanesFor(elementSpec(ElementFormat::E2M1));
  const ValueLanes values = valueLanesFor(elementSpec(ElementFormat::E2M1));
  E2M1Table table = e2m1TableFor();
  __m512i absMask = l.absMask;
  // One group's scales: the divisors (a zero factor, a block below E4M3's smallest scale, divides by 1
  // and has its codes cleared after they are stored, as the scalar path writes all-zero codes), their
  // reciprocals, and the factors the decoder multiplies by.
  struct GroupScales {
    alignas(64) float divisor[16];
    alignas(64) float reciprocal[16];
    alignas(64) float decodeFactor[16];
    __mmask16 zero;
    bool reciprocalsFinite;
  };
  GroupScales s[kScaleGroups];
  // (bits + 3) mod 2^21 in [0, 7]: within 3 ulps below a quarter's start or 4 above it (one vptestnmd
  // where a mask and an unsigned compare for [0, 6] took two instructions per vector).
  __m512i nearStart = _mm512_set1_epi32(3), nearStartBits = _mm512_set1_epi32(0x1ffff8);
  __m512i codeZeroFloor = _mm512_castps_si512(_mm512_set1_ps(0.2f));
  // Held in registers through the plain encode's code loops (GCC otherwise builds some anew at each use,
  // a move and a broadcast each, in the loop). Not with a residual, whose loop holds the decoder's lanes
  // too: pinned there, these pushed others to the stack (error feedback 1.5 ms slower per 16M values).
  if constexpr (!kResidual)
    keepInRegisters(nearStart, nearStartBits, codeZeroFloor, absMask, table.lo, table.hi, table.keyBase,
                    table.keyMax, table.signBit);
  // One group's codes, from its scales. The codes are those of the quotient a / f correctly rounded (the
  // definition's), as the magnitudes are at hand; they take their signs from x. A code depends only on
  // which quarter of a binade the quotient lies in, and on whether it is a quarter's start (an edge:
  // e2m1Codes), so the product with r, 1 / f to within 0.57 ulp (reciprocalsOf), stands in for the
  // quotient wherever it lies 4 or more ulps from a quarter's start: fl(a x r) is within 2 ulps of
  // fl(a / f) (r's error and the two roundings, about 2^-24 each), so both are then inside the same
  // quarter and neither is its start. 8 vectors with a lane nearer a start (about 8 in 2^21 of random
  // values per lane) are divided, and so is a group with a factor outside [2^-125, 2^125) (one at or near
  // 2^-128, whose reciprocal is not a normal float; near 2^125 and up, the 14-bit estimate of the
  // reciprocal could be subnormal, and flushed to zero where a caller sets flush-to-zero). Products below 0.2 are tested as 0.2 (far from a
  // start): there both values round to code 0 (below 0.25, whose tie goes to 0 too), and exact zeros,
  // which sit at a start, would otherwise send every vector of a sparse gradient to the divider (a masked
  // compare instead of the maximum cost 6 % of the dense encode). vdivps bounded the encoder on Intel
  // cores (16 lanes per 10 cycles, about a fifth of its time on the Xeon of 2026-12-04); a quotient
  // corrected by two FMAs measured slower than vdivps on Zen 4. A product's lanes are then none at a
  // start, so its codes skip the tie test (three of the instructions per vector).
  const auto groupCodes = [&](size_t gg, const GroupScales& gs) GRADCOMP_AVX512_LAMBDA {
    const float* xg = x + gg;
    // The product's codes of one vector, and its lanes near a start.
    const auto productCodes = [&](int j, __m512i xb, __mmask16& nearStarts) GRADCOMP_AVX512_LAMBDA {
      const __m512 product =
          _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(xb, absMask)), _mm512_set1_ps(gs.reciprocal[j]));
      const __m512i tested = _mm512_max_epu32(_mm512_castps_si512(product), codeZeroFloor);
      nearStarts = static_cast<__mmask16>(nearStarts |
                                          _mm512_testn_epi32_mask(_mm512_add_epi32(tested, nearStart), nearStartBits));
      return e2m1CodesOffEdges(_mm512_castps_si512(product), xb, table);
    };
    const auto quotientCodes = [&](int j, __m512i xb) GRADCOMP_AVX512_LAMBDA {
      const __m512 magnitude = _mm512_castsi512_ps(_mm512_and_si512(xb, absMask));
      return e2m1Codes(_mm512_castps_si512(_mm512_div_ps(magnitude, _mm512_set1_ps(gs.divisor[j]))), xb, table);
    };
    for (int half = 0; half < 2; ++half) {
      const int j0 = 8 * half;
      __m512i c[8];
      if constexpr (kResidual) {
        // Error feedback's tiles are one group, from L1: each vector's residual right after its codes
        // (all 8 vectors' codes first, then their residuals, took 1 ms more per 16M values).
        for (int k = 0; k < 8; ++k) {
          const int j = j0 + k;
          const __m512i xb = _mm512_loadu_si512(xg + 16 * j);
          __mmask16 nearStarts = 0;
          if (gs.reciprocalsFinite) c[k] = productCodes(j, xb, nearStarts);
          if (!gs.reciprocalsFinite || nearStarts) c[k] = quotientCodes(j, xb);
          // A zero-factor block's codes are cleared below: its decoded values are +0 (0 x 0), whatever
          // signs these codes carry.
          const __m512i stored = (gs.zero >> j) & 1 ? _mm512_setzero_si512() : c[k];
          const __m512 decoded = _mm512_mul_ps(elementValues(stored, values), _mm512_set1_ps(gs.decodeFactor[j]));
          _mm512_storeu_ps(residual + gg + 16 * j, _mm512_sub_ps(_mm512_castsi512_ps(xb), decoded));
        }
      } else {
        // Any lane of the 8 vectors near a start, and the 8 are divided: one test per 8 vectors, not a
        // branch per vector, so that the 8 unroll.
        __mmask16 nearStarts = 0;
        if (gs.reciprocalsFinite) {
#pragma GCC unroll 8
          for (int k = 0; k < 8; ++k) {
            // The next phases' input (8 KiB ahead), one line per vector of codes, spread over this arithmetic.
            prefetchFloats(x, gg + kAhead + 16 * (j0 + k), gg + kAhead + 16 * (j0 + k) + 16, PrefetchInto::L1);
            c[k] = productCodes(j0 + k, _mm512_loadu_si512(xg + 16 * (j0 + k)), nearStarts);
          }
        }
        if (!gs.reciprocalsFinite || nearStarts)
          for (int k = 0; k < 8; ++k) c[k] = quotientCodes(j0 + k, _mm512_loadu_si512(xg + 16 * (j0 + k)));
      }
      storeNibbles8Vectors(c, packed + gg / 2 + 64 * half);
    }
    for (__mmask16 z = gs.zero; z; z = static_cast<__mmask16>(z & (z - 1)))
      __builtin_memset(packed + gg / 2 + 8 * static_cast<size_t>(__builtin_ctz(z)), 0, 8);
  };
  size_t g = 0;
  while (g + kGroupValues <= n) {
    const size_t groups = std::min(kScaleGroups, (n - g) / kGroupValues);
    size_t ready = 0;
    for (; ready < groups; ++ready) {
      const size_t gg = g + kGroupValues * ready;
      const float* xg = x + gg;
      __m512i amax;
      if (maxBits) {
        amax = _mm512_loadu_si512(maxBits + gg / 16);
      } else {
        __m512i a[16];
        for (int j = 0; j < 16; ++j) a[j] = _mm512_and_si512(_mm512_loadu_si512(xg + 16 * j), absMask);
        amax = laneMaxima16(a);
      }
      if (_mm512_cmpge_epu32_mask(amax, _mm512_set1_epi32(0x7f800000))) break;
      __m512 factors;
      const __m512i codes = nvfp4ScaleCodesByProduct(_mm512_castsi512_ps(amax), scales, factors);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(scaleCodes + gg / 16), _mm512_cvtepi32_epi8(codes));
      GroupScales& gs = s[ready];
      gs.zero = _mm512_cmp_ps_mask(factors, _mm512_setzero_ps(), _CMP_EQ_OQ);
      const __m512 divisors = _mm512_mask_mov_ps(factors, gs.zero, _mm512_set1_ps(1.0f));
      _mm512_store_ps(gs.divisor, divisors);
      if constexpr (kResidual) _mm512_store_ps(gs.decodeFactor, factors);
      // The products stand in for quotients only with divisors in [2^-125, 2^125), whose reciprocals
      // reciprocalsOf gives to within 0.57 ulp (a factor at or near 2^-128 divides its group; so does one
      // past 2^125, which only a t near the largest a decoder accepts reaches).
      const __m512i divisorBits = _mm512_castps_si512(divisors);
      gs.reciprocalsFinite =
          _mm512_cmplt_epu32_mask(_mm512_sub_epi32(divisorBits, _mm512_set1_epi32(0x01000000)),
                                  _mm512_set1_epi32(0x7e000000 - 0x01000000)) == 0xffff;
      const __m512 reciprocals = reciprocalsOf(divisors);
      _mm512_store_ps(gs.reciprocal, reciprocals);
      // Saturation: a block's largest quotient is its maximum's (division is monotonic), so only the
      // blocks whose maximum reaches the overflow midpoint are counted lane by lane; with the tensor's own
      // scale t no block does but by E4M3's rounding of its scale. Screened by the product (within 2 ulps
      // of the quotient), 4 ulps short of the midpoint; the lanes of a screened block are divided.
      const __m512i screen =
          gs.reciprocalsFinite
              ? _mm512_add_epi32(_mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(amax), reciprocals)),
                                 _mm512_set1_epi32(4))
              : _mm512_castps_si512(_mm512_div_ps(_mm512_castsi512_ps(amax), divisors));
      __mmask16 saturating =
          static_cast<__mmask16>(_mm512_mask_cmpge_epu32_mask(static_cast<__mmask16>(~gs.zero), screen, l.overflow));
      while (saturating) {
        const int j = __builtin_ctz(saturating);
        saturating = static_cast<__mmask16>(saturating & (saturating - 1));
        const __m512 y = _mm512_div_ps(_mm512_abs_ps(_mm512_loadu_ps(xg + 16 * j)), _mm512_set1_ps(gs.divisor[j]));
        saturated += static_cast<uint64_t>(__builtin_popcount(_mm512_cmpge_epu32_mask(_mm512_castps_si512(y), l.overflow)));
      }
    }
    for (size_t k = 0; k < ready; ++k) groupCodes(g + kGroupValues * k, s[k]);
    g += kGroupValues * ready;
    if (ready < groups) break;  // a group with NaN/Inf: encodeBlocks finds and reports it
  }
  return g;
}

// MX with its standard 32-element blocks, 16 blocks (512 elements) per step, as NVFP4's group encoder: the
// maxima by one transposing reduction (after a maximum of each block's two halves), the 16 shared scales
// in one register, the codes of each block from its two vectors with the factor broadcast from a stored
// lane. Per block, encodeBlocks paid a horizontal maximum, a scalar scale rule, a test of a zero factor and
// a saturation count on every vector (1.3 cycles per value on the Xeon of 2026-12-04). The whole blocks
// of a last, shorter group go the same way. Stops before a partial last block or a group whose maximum is
// not finite; returns the elements encoded. With kResidual, residual = x - value(code) x
// e8m0ToFloat(code), the decoder's product, from the codes in registers.
template <bool kResidual, int kMantBits, int kBits>
GRADCOMP_AVX512 size_t encodeMxGroups(const float* x, size_t n, const ElementSpec& s, uint8_t* packed,
                                      uint8_t* scaleCodes, uint64_t& saturated, float* residual) {
  constexpr size_t kBlock = 32, kGroupValues = kBlock * 16;
  const ElementLanes l = lanesFor(s);
  const ValueLanes values = valueLanesFor(s);
  const __m512i emax = _mm512_set1_epi32(s.emax), inverseBias = _mm512_set1_epi32(254);
  // The `count` whole blocks from element g (16, or fewer in a last group: error feedback's 256-value
  // tiles are 8 blocks, which went through encodeBlocks before: mxfp8 encode + ef 17.8-18.7 -> 16.6-16.9
  // ms per 16M); false, and nothing written, where their maximum is not finite. count is a compile-time
  // 16 for the whole groups, so their loops stay unrolled (with a run-time count the plain encode took
  // 5.4-5.9 against 5.1-5.2 ms; as it is, 5.4-5.7: the shorter group is not free).
  const auto encodeGroup = [&](size_t g, auto count) GRADCOMP_AVX512_LAMBDA {
    const float* xg = x + g;
    const __mmask16 valid = count == 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << count) - 1u);
    __m512i halves[16];
    for (int j = 0; j < 16; ++j)
      halves[j] = j < count ? _mm512_max_epu32(_mm512_and_si512(_mm512_loadu_si512(xg + 32 * j), l.absMask),
                                               _mm512_and_si512(_mm512_loadu_si512(xg + 32 * j + 16), l.absMask))
                            : _mm512_setzero_si512();
    const __m512i amax = laneMaxima16(halves);
    if (_mm512_cmpge_epu32_mask(amax, _mm512_set1_epi32(0x7f800000))) return false;
    // mxSharedScaleCode: floor(log2 amax) - emax + 127 clamped at 0 is the exponent field less emax for a
    // normal amax; a subnormal or zero amax (field 0) gives 0, as the clamp at -127 does (emax >= 1).
    const __m512i codes = _mm512_max_epi32(_mm512_sub_epi32(_mm512_srli_epi32(amax, 23), emax), _mm512_setzero_si512());
    if (count == 16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(scaleCodes + g / kBlock), _mm512_cvtepi32_epi8(codes));
    else
      _mm_mask_storeu_epi8(scaleCodes + g / kBlock, valid, _mm512_cvtepi32_epi8(codes));
    // mxInverseScale: 2^(127 - code), exact products with x.
    const __m512 factors = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(inverseBias, codes), 23));
    alignas(64) float f[16], decodeFactor[16];
    _mm512_store_ps(f, factors);
    if constexpr (kResidual) {
      alignas(16) uint8_t c8[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(c8), _mm512_cvtepi32_epi8(codes));
      for (int j = 0; j < 16; ++j) decodeFactor[j] = e8m0ToFloat(c8[j]);
    }
    for (int v = 0; v < 2 * count; ++v) {
      const int j = v / 2;
      // The input 4 KiB ahead, one line per vector, spread over the codes' arithmetic (as encodeBlocks).
      if constexpr (!kResidual) prefetchFloats(x, g + 1024 + 16 * v, g + 1040 + 16 * v, PrefetchInto::L1);
      const __m512 xv = _mm512_loadu_ps(xg + 16 * v);
      const __m512i c = elementCodesOf<kMantBits, kBits>(_mm512_mul_ps(xv, _mm512_set1_ps(f[j])), l);
      storeCodes(packCodes(c, kBits), kBits, packed + (g + 16 * v) * static_cast<size_t>(kBits) / 8, 16);
      if constexpr (kResidual)
        _mm512_storeu_ps(residual + g + 16 * v,
                         _mm512_sub_ps(xv, _mm512_mul_ps(elementValues(c, values), _mm512_set1_ps(decodeFactor[j]))));
    }
    // Saturation: a block's largest scaled magnitude is its maximum's (the product is monotonic), so only
    // the blocks whose scaled maximum reaches the overflow midpoint are counted lane by lane.
    for (__mmask16 sat = _mm512_mask_cmpge_epu32_mask(
             valid, _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(amax), factors)), l.overflow);
         sat; sat = static_cast<__mmask16>(sat & (sat - 1))) {
      const int j = __builtin_ctz(sat);
      for (int h = 0; h < 2; ++h)
        saturated += saturatedLanes(_mm512_mul_ps(_mm512_loadu_ps(xg + 32 * j + 16 * h), _mm512_set1_ps(f[j])), l, 0xffff);
    }
    return true;
  };
  size_t g = 0;
  for (; g + kGroupValues <= n; g += kGroupValues)
    if (!encodeGroup(g, std::integral_constant<int, 16>{})) return g;
  const int rest = static_cast<int>((n - g) / kBlock);
  if (rest > 0 && encodeGroup(g, rest)) g += kBlock * static_cast<size_t>(rest);
  return g;
}

// encodeMxGroups for fmt's code width and mantissa.
template <bool kResidual>
GRADCOMP_AVX512 size_t encodeMxGroupsOf(ElementFormat fmt, const float* x, size_t n, uint8_t* packed,
                                        uint8_t* scaleCodes, uint64_t& saturated, float* residual) {
  const ElementSpec s = elementSpec(fmt);
  switch (fmt) {
    case ElementFormat::E4M3: return encodeMxGroups<kResidual, 3, 8>(x, n, s, packed, scaleCodes, saturated, residual);
    case ElementFormat::E5M2: return encodeMxGroups<kResidual, 2, 8>(x, n, s, packed, scaleCodes, saturated, residual);
    case ElementFormat::E2M3: return encodeMxGroups<kResidual, 3, 6>(x, n, s, packed, scaleCodes, saturated, residual);
    case ElementFormat::E3M2: return encodeMxGroups<kResidual, 2, 6>(x, n, s, packed, scaleCodes, saturated, residual);
    case ElementFormat::E2M1: return encodeMxGroups<kResidual, 1, 4>(x, n, s, packed, scaleCodes, saturated, residual);
  }
  return 0;
}

}  // namespace

GRADCOMP_AVX512 void decodeMxBlocksPacked(const uint8_t* packed, size_t n, size_t blockSize, ElementFormat fmt,
                                          const uint8_t* scaleCodes, float* out, bool accumulate) {
  const ElementSpec s = elementSpec(fmt);
  decodeBlocks(packed, n, blockSize, s.bits, valueLanesFor(s), out, accumulate,
               [&](size_t block) { return e8m0ToFloat(scaleCodes[block]); });
}

GRADCOMP_AVX512 void decodeNvfp4BlocksPacked(const uint8_t* packed, size_t n, size_t blockSize,
                                             const uint8_t* scaleCodes, float t, float* out, bool accumulate) {
  decodeBlocks(packed, n, blockSize, 4, valueLanesFor(elementSpec(ElementFormat::E2M1)), out, accumulate,
               [&](size_t block) { return nvfp4BlockFactor(scaleCodes[block], t); });
}

GRADCOMP_AVX512 uint64_t encodeMxBlocksPacked(const float* x, size_t n, size_t blockSize, ElementFormat fmt,
                                              uint8_t* packed, uint8_t* scaleCodes, uint64_t* firstBad, float* residual) {
  const ElementSpec s = elementSpec(fmt);
  const ElementLanes l = lanesFor(s);
  // The standard 32-element blocks go through the group encoder; the rest (a last partial group, another
  // block size, a group holding NaN/Inf, which encodeBlocks reports) through encodeBlocks.
  uint64_t saturated = 0;
  const size_t done = blockSize != 32 ? 0
                      : residual      ? encodeMxGroupsOf<true>(fmt, x, n, packed, scaleCodes, saturated, residual)
                                      : encodeMxGroupsOf<false>(fmt, x, n, packed, scaleCodes, saturated, nullptr);
  if (done == n) return saturated;
  x += done;
  n -= done;
  packed += done * static_cast<size_t>(l.bits) / 8;
  scaleCodes += done / blockSize;
  if (residual) residual += done;
  uint64_t bad = ~uint64_t{0};
  const auto encode = [&](auto withResidual) GRADCOMP_AVX512_LAMBDA {
    return encodeBlocks<decltype(withResidual)::value>(
        x, n, blockSize, l, packed, scaleCodes, firstBad ? &bad : nullptr,
        [&](const uint32_t* maxBits, size_t count, uint8_t* codes, float* factors, bool& divide) {
          for (size_t j = 0; j < count; ++j) {
            codes[j] = mxSharedScaleCode(bitsToFloat(maxBits[j]), s);
            factors[j] = mxInverseScale(codes[j]);  // x / 2^e as the exact product with 2^-e
          }
          divide = false;
        },
        residual, valueLanesFor(s), [](uint8_t code) { return e8m0ToFloat(code); });
  };
  saturated += residual ? encode(std::true_type{}) : encode(std::false_type{});
  if (firstBad && bad != ~uint64_t{0}) *firstBad = done + bad;
  return saturated;
}

GRADCOMP_AVX512 uint32_t nvfp4BlockMaxBits(const float* x, size_t n, uint32_t* maxBits) {
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff);
  __m512i acc = _mm512_setzero_si512();
  size_t g = 0;
  for (; g + 256 <= n; g += 256) {
    __m512i a[16];
    for (int j = 0; j < 16; ++j) {
      // The tensor's one read from memory before the encode: each line 4 KiB ahead asked for into L1, as
      // maxAbsBits, and 32 KiB ahead into L2. Zen 4 (2026-12-05): with the L1 requests alone this pass
      // took 1.4x a plain read's time (3.4-4.2 ms per 16M values against 2.6-2.9; its arithmetic costs
      // 0.1 ms in cache: the 16-block reduction between the loads keeps fewer misses in flight); with the
      // L2 requests far ahead 2.8-3.3 ms.
      prefetchFloats(x, g + 1024 + 16 * j, g + 1040 + 16 * j, PrefetchInto::L1);
      prefetchFloats(x, g + 8192 + 16 * j, g + 8208 + 16 * j, PrefetchInto::L2);
      a[j] = _mm512_and_si512(_mm512_loadu_si512(x + g + 16 * j), absMask);
    }
    const __m512i m = laneMaxima16(a);
    _mm512_storeu_si512(maxBits + g / 16, m);
    acc = _mm512_max_epu32(acc, m);
  }
  uint32_t largest = _mm512_reduce_max_epu32(acc);
  for (; g < n; g += 16) {
    const uint32_t m = blockMaxBits(x + g, n - g < 16 ? n - g : 16);
    maxBits[g / 16] = m;
    largest = m > largest ? m : largest;
  }
  return largest;
}

GRADCOMP_AVX512 uint64_t encodeNvfp4BlocksPacked(const float* x, size_t n, size_t blockSize, float t, uint8_t* packed,
                                                 uint8_t* scaleCodes, uint64_t* firstBad, float* residual,
                                                 const uint32_t* blockMaxBits) {
  // The standard 16-element blocks go through the group encoder; the rest (a last partial group, another
  // block size, a group holding NaN/Inf, which it reports) through encodeBlocks.
  uint64_t saturated = 0;
  const size_t done = blockSize != 16 ? 0
                      : residual      ? encodeNvfp4Groups<true>(x, n, t, nullptr, packed, scaleCodes, saturated, residual)
                                      : encodeNvfp4Groups<false>(x, n, t, blockMaxBits, packed, scaleCodes, saturated, nullptr);
  if (done == n) return saturated;
  const Nvfp4ScaleLanes scales = nvfp4ScaleLanesFor(t);
  uint64_t bad = ~uint64_t{0};
  const auto encodeRest = [&](auto withResidual) GRADCOMP_AVX512_LAMBDA {
    return encodeBlocks<decltype(withResidual)::value>(
        x + done, n - done, blockSize, lanesFor(elementSpec(ElementFormat::E2M1)), packed + done / 2,
        scaleCodes + done / blockSize, firstBad ? &bad : nullptr,
        [&](const uint32_t* maxBits, size_t count, uint8_t* codes, float* factors, bool& divide) GRADCOMP_AVX512_LAMBDA {
          const __mmask16 m = count == kGroup ? __mmask16{0xffff} : static_cast<__mmask16>((1u << count) - 1u);
          __m512 f;
          const __m512i c = nvfp4ScaleCodes(_mm512_castsi512_ps(_mm512_maskz_loadu_epi32(m, maxBits)), scales, m, f);
          _mm_mask_storeu_epi8(codes, m, _mm512_cvtepi32_epi8(c));
          _mm512_mask_storeu_ps(factors, m, f);
          divide = true;  // divided, not multiplied by a reciprocal: the definition's rounding
        },
        residual ? residual + done : nullptr, valueLanesFor(elementSpec(ElementFormat::E2M1)),
        [t](uint8_t code) { return nvfp4BlockFactor(code, t); });
  };
  saturated += residual ? encodeRest(std::true_type{}) : encodeRest(std::false_type{});
  if (firstBad && bad != ~uint64_t{0}) *firstBad = done + bad;
  return saturated;
}

}  // namespace gradcomp::cpu::avx512
#endif
