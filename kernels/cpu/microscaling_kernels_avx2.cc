// The element conversion is microscaling_kernels.cc's branch-free ElementLane on 8 lanes, as the AVX-512
// kernels run it on 16. AVX2 has no unsigned 32-bit compare: every compared magnitude is below 2^31
// (the sign is masked off) and so is every threshold, so the signed compare gives the same answer.
// Codes are packed without leaving registers: 8-bit by two unsigned narrowings, 6-bit by two
// multiply-adds that join neighbours (into 12 bits, then 24) and a byte shuffle, 4-bit by moving each odd
// element's code beside the even one's within a 64-bit lane, then the same narrowings (NVFP4's group
// encoder: 64 codes at a time narrowed to bytes first, neighbours joined by one multiply-add,
// storeNibbles64).
#include "kernels/cpu/microscaling_kernels_avx2.h"

#if GRADCOMP_CPU_AVX2_MICROSCALING
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/avx2_block_steps.h"
#include "kernels/cpu/e2m1_quarter_codes.h"
#include "kernels/cpu/prefetch.h"

namespace gradcomp::cpu::avx2 {
namespace {

using namespace scalar;

// floatToElement's steps for one format, as 8-lane constants.
struct ElementLanes {
  __m256i absMask, rebias, magicBits, minNormal, maxBits, maxCode, overflow, one;
  __m256 magic;
  __m128i shift, signShift;
  int bits;
};

ElementLanes lanesFor(const ElementSpec& s) {
  ElementLanes l;
  l.absMask = _mm256_set1_epi32(0x7fffffff);
  l.rebias = _mm256_set1_epi32(
      static_cast<int>((static_cast<uint32_t>(s.bias - 127) << 23) + ((1u << (22 - s.mantBits)) - 1u)));
  l.magicBits = _mm256_set1_epi32(static_cast<int>(floatBits(s.subnormalMagic)));
  l.minNormal = _mm256_set1_epi32(static_cast<int>(s.minNormalBits));
  l.maxBits = _mm256_set1_epi32(static_cast<int>(floatBits(s.maxValue)));
  l.maxCode = _mm256_set1_epi32(s.maxCode);
  l.overflow = _mm256_set1_epi32(static_cast<int>(elementOverflowBits(s)));
  l.one = _mm256_set1_epi32(1);
  l.magic = _mm256_set1_ps(s.subnormalMagic);
  l.shift = _mm_cvtsi32_si128(23 - s.mantBits);
  l.signShift = _mm_cvtsi32_si128(32 - s.bits);  // bit 31 down to the code's top bit
  l.bits = s.bits;
  return l;
}

// The lanes of 8 scaled values at or past the overflow midpoint.
inline uint32_t saturatedLanes(__m256 v, const ElementLanes& l) {
  const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), l.absMask);
  const __m256i saturates = _mm256_cmpgt_epi32(a, _mm256_sub_epi32(l.overflow, l.one));  // a >= overflow
  return static_cast<uint32_t>(__builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(saturates)))));
}

// The codes of 8 scaled values (one per 32-bit lane).
inline __m256i elementCodesUncounted(__m256 v, const ElementLanes& l) {
  const __m256i xb = _mm256_castps_si256(v);
  const __m256i a = _mm256_and_si256(xb, l.absMask);
  const __m256i sign = _mm256_srl_epi32(_mm256_andnot_si256(l.absMask, xb), l.signShift);
  const __m256i sub =
      _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), l.magic)), l.magicBits);
  const __m256i odd = _mm256_and_si256(_mm256_srl_epi32(a, l.shift), l.one);
  const __m256i nor = _mm256_srl_epi32(_mm256_add_epi32(_mm256_add_epi32(a, l.rebias), odd), l.shift);
  __m256i code = _mm256_blendv_epi8(nor, sub, _mm256_cmpgt_epi32(l.minNormal, a));  // a < min normal
  code = _mm256_blendv_epi8(l.maxCode, code, _mm256_cmpgt_epi32(l.maxBits, a));    // a >= max: max code
  code = _mm256_min_epu32(code, l.maxCode);
  return _mm256_or_si256(sign, code);
}

// The codes of 8 scaled values; sat counts the lanes at or past the overflow midpoint.
inline __m256i elementCodes(__m256 v, const ElementLanes& l, uint32_t& sat) {
  sat += saturatedLanes(v, l);
  return elementCodesUncounted(v, l);
}

// elementToFloat on 8 lanes for finite codes: sign | exponent rebiased | mantissa shifted up, or the
// mantissa x the subnormal step for exponent 0 (NVFP4's E4M3 block scales).
inline __m256 elementValues(__m256i c, const ElementSpec& s) {
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(1 << (s.bits - 1))), 32 - s.bits);
  const __m256i e = _mm256_and_si256(_mm256_srli_epi32(c, s.mantBits), _mm256_set1_epi32((1 << (s.bits - 1 - s.mantBits)) - 1));
  const __m256i mant = _mm256_and_si256(c, _mm256_set1_epi32((1 << s.mantBits) - 1));
  const __m256i normal = _mm256_or_si256(_mm256_add_epi32(_mm256_slli_epi32(e, 23), _mm256_set1_epi32((127 - s.bias) << 23)),
                                         _mm256_slli_epi32(mant, 23 - s.mantBits));
  const __m256i sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mant), _mm256_set1_ps(s.subnormalStep)));
  const __m256i subnormal = _mm256_cmpeq_epi32(e, _mm256_setzero_si256());
  return _mm256_castsi256_ps(_mm256_or_si256(_mm256_blendv_epi8(normal, sub, subnormal), sign));
}

// 16 6-bit codes (two registers of 8, each code below 64) packed LSB-first into 12 bytes: neighbouring
// codes joined into 12 bits by one multiply-add of 16-bit words (c0 + 64 c1), neighbouring pairs into 24
// bits by a second (p0 + 4096 p1), then each 24-bit group's three bytes gathered in order.
inline void store16Sixes(__m256i lo, __m256i hi, uint8_t* out) {
  const __m256i w = _mm256_packus_epi32(lo, hi);  // 128-bit lane 0: codes 0-3, 8-11; lane 1: 4-7, 12-15
  const __m256i pairs = _mm256_madd_epi16(w, _mm256_set1_epi32(1 | (64 << 16)));
  // Per lane, dword 0: codes 0-3 (lane 1: 4-7), dword 1: codes 8-11 (lane 1: 12-15), then repeated.
  const __m256i quads = _mm256_madd_epi16(_mm256_packus_epi32(pairs, pairs), _mm256_set1_epi32(1 | (4096 << 16)));
  const __m256i b = _mm256_shuffle_epi8(quads, _mm256_setr_epi8(0, 1, 2, -1, -1, -1, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1,  //
                                                                -1, -1, -1, 0, 1, 2, -1, -1, -1, 4, 5, 6, -1, -1, -1, -1));
  const __m128i bytes = _mm_or_si128(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), bytes);
  const uint32_t last = static_cast<uint32_t>(_mm_extract_epi32(bytes, 2));
  std::memcpy(out + 8, &last, sizeof last);
}

// 8 6-bit codes packed into 6 bytes, as store16Sixes.
inline void store8Sixes(__m256i c, uint8_t* out) {
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
  const __m128i pairs = _mm_madd_epi16(w, _mm_set1_epi32(1 | (64 << 16)));
  const __m128i quads = _mm_madd_epi16(_mm_packus_epi32(pairs, pairs), _mm_set1_epi32(1 | (4096 << 16)));
  const uint64_t q = static_cast<uint64_t>(_mm_cvtsi128_si64(quads));  // codes 0-3 in bits 0-23, 4-7 in 32-55
  const uint64_t bytes = (q & 0xffffff) | ((q >> 32) << 24);
  std::memcpy(out, &bytes, 6);  // x86 is little-endian: the low 6 bytes
}

// Stores 16 codes (two registers of 8, each code at most 0xff) packed LSB-first: 16, 12 or 8 bytes.
inline void store16(__m256i lo, __m256i hi, int bits, uint8_t* out) {
  if (bits == 4) return storeNibbles16(lo, hi, out);
  if (bits == 6) return store16Sixes(lo, hi, out);
  // Unsigned narrowings within 128-bit lanes leave lo's first four codes in dword 0, hi's in dword 1,
  // lo's last four in dword 4 and hi's in dword 5: a dword permute puts them in order.
  const __m256i w = _mm256_packus_epi32(lo, hi);
  const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w, w), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(b));
}

// Stores 8 codes packed: 8, 6 or 4 bytes.
inline void store8(__m256i c, int bits, uint8_t* out) {
  if (bits == 4) return storeNibbles8(c, out);
  if (bits == 6) return store8Sixes(c, out);
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(w, w));
}

constexpr size_t kGroup = 16;  // blocks per group of encodeBlocks

// The whole blocks of x, as the AVX-512 encodeBlocks: per group of up to kGroup blocks, their maxima,
// then `scalesOf(maxBits, count, codes, factors)` (all maxima finite) for their scale codes and factors,
// then the element codes of x x factor (kDivide: x / factor), packed at element offset b0. The phases
// let one block's dependent chain (a horizontal maximum, the scale rule, a broadcast) overlap the
// next blocks' work.
template <bool kDivide, typename ScalesOf>
BlocksEncoded encodeBlocks(const float* x, size_t n, size_t blockSize, const ElementLanes& l, uint8_t* packed,
                           uint8_t* scaleCodes, uint64_t* firstBad, ScalesOf&& scalesOf) {
  BlocksEncoded r;
  uint32_t maxBits[kGroup];
  float factors[kGroup];
  const size_t blocks = n / blockSize, bits = static_cast<size_t>(l.bits);
  for (size_t g0 = 0; g0 < blocks; g0 += kGroup) {
    const size_t count = blocks - g0 < kGroup ? blocks - g0 : kGroup;
    for (size_t j = 0; j < count; ++j) maxBits[j] = blockMaxAbsBitsAvx2(x + (g0 + j) * blockSize, blockSize);
    for (size_t j = 0; j < count; ++j) {
      if (!isFiniteBits(maxBits[j])) {
        const size_t b0 = (g0 + j) * blockSize;
        if (firstBad) *firstBad = b0 + firstNonFiniteIndex(x + b0, blockSize);
        r.done = n;
        return r;
      }
    }
    scalesOf(maxBits, count, scaleCodes + g0, factors);
    uint32_t sat = 0;
    for (size_t j = 0; j < count; ++j) {
      const size_t b0 = (g0 + j) * blockSize;
      const float* xb = x + b0;
      uint8_t* out = packed + b0 * bits / 8;
      if (factors[j] == 0.0f) {  // an NVFP4 block below E4M3's smallest scale: every code 0
        std::memset(out, 0, blockSize * bits / 8);
        continue;
      }
      const __m256 f = _mm256_set1_ps(factors[j]);
      auto scaled = [&](size_t i) {
        const __m256 v = _mm256_loadu_ps(xb + i);
        return kDivide ? _mm256_div_ps(v, f) : _mm256_mul_ps(v, f);
      };
      size_t i = 0;
      for (; i + 16 <= blockSize; i += 16) {
        const __m256i lo = elementCodes(scaled(i), l, sat);
        const __m256i hi = elementCodes(scaled(i + 8), l, sat);
        store16(lo, hi, l.bits, out + i * bits / 8);
      }
      if (i < blockSize) store8(elementCodes(scaled(i), l, sat), l.bits, out + i * bits / 8);
    }
    r.saturated += sat;
  }
  r.done = blocks * blockSize;
  return r;
}

// ---------------------------------------------------------------- NVFP4's 16-element blocks

// E2M1 codes of 8 magnitudes a (fp32 bits) with the signs of xb: elementCodes with E2M1's shifts as
// immediates (22: its mantissa's 1 bit) and, as its largest value 6 tops its top binade, the final
// minimum as the whole saturation (which the caller counts per block).
inline __m256i e2m1Codes(__m256i a, __m256i xb, const ElementLanes& l) {
  const __m256i sub =
      _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), l.magic)), l.magicBits);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 22), l.one);
  const __m256i nor = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, l.rebias), odd), 22);
  // a < min normal where a - min normal is negative: blendv_ps reads each lane's sign bit alone, so the
  // difference selects without a compare (which the compiler made a minimum and an equality test).
  const __m256 below = _mm256_castsi256_ps(_mm256_sub_epi32(a, l.minNormal));
  const __m256i code = _mm256_min_epu32(
      _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(nor), _mm256_castsi256_ps(sub), below)), l.maxCode);
  return _mm256_or_si256(code, _mm256_and_si256(_mm256_srli_epi32(xb, 28), _mm256_set1_epi32(8)));
}

// E2M1 codes by quarter-binade key (e2m1_quarter_codes.h), 32 at a time in bytes, for products that
// lie at no quarter's start (where the key alone fixes the code): AVX2 has no 32-entry permute, so the
// keys, capped at 31, index two 16-entry byte shuffles, the low table at key + 112 and the high one at
// key - 16 (each index with bit 7 set, the other table's keys, reads 0).
struct E2M1KeyBytes {
  __m256i keyBase;             // 16-bit lanes
  __m256i lowTable, highTable; // entries 0-15 and 16-31 (flags cleared), in both 128-bit lanes
  __m256i keyMax, lowIndex, highIndex, signBit;
};

E2M1KeyBytes e2m1KeyBytesFor() {
  alignas(32) uint8_t low[32], high[32];
  const uint32_t* e = e2m1QuarterEntries();
  for (int i = 0; i < 32; ++i) {
    low[i] = static_cast<uint8_t>(e[i % 16] & 7u);
    high[i] = static_cast<uint8_t>(e[16 + i % 16] & 7u);
  }
  return {_mm256_set1_epi16(static_cast<short>(kE2M1KeyBase)),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(low)),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(high)),
          _mm256_set1_epi8(static_cast<char>(kE2M1Keys - 1)),
          _mm256_set1_epi8(112),
          _mm256_set1_epi8(16),
          _mm256_set1_epi8(8)};
}

// The signed E2M1 codes of 32 values, one per byte in the order of storeNibbles64's packs (p[v]: the
// magnitudes' products, nonnegative finite fp32 bits at no quarter's start, of x[v]'s 8 values).
inline __m256i e2m1CodeBytes(const __m256i* p, const __m256i* x, const E2M1KeyBytes& k) {
  // The keys: each product's top bits (below 2^10) narrowed to 16 bits, less the base (saturating at 0),
  // narrowed to bytes (saturating at 255).
  const auto keyWords = [&](int v) {
    return _mm256_subs_epu16(_mm256_packus_epi32(_mm256_srli_epi32(p[v], 21), _mm256_srli_epi32(p[v + 1], 21)),
                             k.keyBase);
  };
  const __m256i key = _mm256_min_epu8(_mm256_packus_epi16(keyWords(0), keyWords(2)), k.keyMax);
  const __m256i code = _mm256_or_si256(_mm256_shuffle_epi8(k.lowTable, _mm256_add_epi8(key, k.lowIndex)),
                                       _mm256_shuffle_epi8(k.highTable, _mm256_sub_epi8(key, k.highIndex)));
  // The signs: x's bits narrowed by signed saturation, which keeps each sign in bit 7 of its byte.
  const __m256i sign = _mm256_packs_epi16(_mm256_packs_epi32(x[0], x[1]), _mm256_packs_epi32(x[2], x[3]));
  return _mm256_blendv_epi8(code, _mm256_or_si256(code, k.signBit), sign);
}

// NVFP4 with its standard 16-element blocks, 8 blocks (128 elements) a group, as the AVX-512 group
// encoder, in chunks of up to 8 groups: first every group's scales (each group's maxima by one transposing
// reduction, or loaded from blockMaxBits where the tensor's first pass kept them; the 8 scales in one
// register; the divisors and their reciprocals stored), then every group's codes. A group's scales are a
// chain of dependent steps (reduction, division, two conversions) that, interleaved with its own codes,
// kept the reorder window from reaching the next group's; chunked, 8 such chains overlap. Saturation is
// counted only in the blocks whose maximum reaches the overflow midpoint (division is monotonic: a
// block's largest quotient is its maximum's). Stops before a last partial group or a group whose maximum
// is not finite; returns the elements encoded.
//
// The codes are those of the quotient a / f correctly rounded (the definition's; a zero factor's block is
// divided by 1 and its codes cleared afterwards). As on AVX-512, the product a x r with r = fl(1 / f)
// stands in for the quotient wherever it lies 4 or more ulps from a quarter binade's start: r is within
// half an ulp of 1 / f, so fl(a x r) is within 2 ulps of fl(a / f), both lie inside the same quarter and
// neither is its start, where alone the code is not the key's (e2m1_quarter_codes.h). Products below 0.2
// are tested as 0.2, far from a start: there both round to code 0, and the exact zeros of a sparse
// gradient, which sit at a start, would otherwise all be divided. 64 codes (4 blocks) with a lane nearer
// a start (about 8 in 2^21 of random values per lane) are divided, and so is a group with a factor
// outside [2^-125, 2^125), whose reciprocal could be subnormal. vdivps, one per 8 values, and the
// rounding of each quotient in its 32-bit lane took most of this loop's arithmetic; the keys are found
// and looked up on bytes, 32 at a time. (The scales in a function of their own, their constants kept in
// registers, ran faster in cache but 0.3-1 ms slower per 16M values from memory, with a margin that moved
// with the stack's layout: docs/notes.md, twenty-sixth part.)
size_t encodeNvfp4Groups(const float* x, size_t n, float t, const uint32_t* blockMaxBits, uint8_t* packed,
                         uint8_t* scaleCodes, uint64_t& saturated) {
  constexpr size_t kGroups = 8;  // per chunk: 4 KiB of input (without kept maxima, in L1 between the phases)
  const ElementLanes l = lanesFor(elementSpec(ElementFormat::E2M1));
  const ElementSpec e4m3 = elementSpec(ElementFormat::E4M3);
  const ElementLanes scaleLanes = lanesFor(e4m3);
  const E2M1KeyBytes keys = e2m1KeyBytesFor();
  const __m256 vSixT = _mm256_set1_ps(mulRn(kNvfp4ElementMax, t)), vT = _mm256_set1_ps(t);
  const __m256i maxFinite = _mm256_set1_epi32(0x7f7fffff), atOverflow = _mm256_sub_epi32(l.overflow, l.one);
  // (bits + 3) & 0x1ffff8 is zero within 3 ulps below a quarter's start or 4 above it.
  const __m256i codeZeroFloor = _mm256_castps_si256(_mm256_set1_ps(0.2f)), nearStart = _mm256_set1_epi32(3),
                nearStartBits = _mm256_set1_epi32(0x1ffff8);
  size_t g = 0;
  while (g + 128 <= n) {
    alignas(32) float divisors[kGroups][8], reciprocals[kGroups][8];
    unsigned zero[kGroups], sat[kGroups];
    bool reciprocalsUsable[kGroups];
    size_t groups = 0;
    bool nonFinite = false;
    for (; groups < kGroups && g + 128 * (groups + 1) <= n; ++groups) {
      const float* xg = x + g + 128 * groups;
      __m256i amax;
      if (blockMaxBits) {
        amax = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blockMaxBits + (g + 128 * groups) / 16));
      } else {
        __m256i m[8];
        for (int j = 0; j < 8; ++j) {
          // The line 2 KiB ahead, as blockMaxAbsBitsAvx2 asks for it: this is the encoder's stream from memory.
          prefetchFloats(xg, 16 * j + 512, 16 * j + 528, PrefetchInto::L1);
          m[j] = _mm256_max_epu32(_mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xg + 16 * j)), l.absMask),
                                  _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xg + 16 * j + 8)), l.absMask));
        }
        amax = laneMaxima8(m);
      }
      if (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(amax, maxFinite)))) {
        nonFinite = true;
        break;
      }
      uint32_t unused = 0;  // a scale's saturation is not an element's
      const __m256i c = elementCodes(_mm256_div_ps(_mm256_castsi256_ps(amax), vSixT), scaleLanes, unused);
      const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(scaleCodes + (g + 128 * groups) / 16), _mm_packus_epi16(w, w));
      const __m256 factors = _mm256_mul_ps(elementValues(c, e4m3), vT);
      const __m256 isZero = _mm256_cmp_ps(factors, _mm256_setzero_ps(), _CMP_EQ_OQ);
      const __m256 d = _mm256_blendv_ps(factors, _mm256_set1_ps(1.0f), isZero);
      _mm256_store_ps(divisors[groups], d);
      _mm256_store_ps(reciprocals[groups], _mm256_div_ps(_mm256_set1_ps(1.0f), d));
      // d in [2^-125, 2^125): its bits in [0x01000000, 0x7e000000), both bounds below 2^31.
      const __m256i dBits = _mm256_castps_si256(d);
      reciprocalsUsable[groups] =
          _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_and_si256(
              _mm256_cmpgt_epi32(dBits, _mm256_set1_epi32(0x00ffffff)),
              _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7e000000), dBits)))) == 0xff;
      zero[groups] = static_cast<unsigned>(_mm256_movemask_ps(isZero));
      const __m256i ymax = _mm256_castps_si256(_mm256_div_ps(_mm256_castsi256_ps(amax), d));
      sat[groups] = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(ymax, atOverflow)))) &
                    ~zero[groups];
    }
    for (size_t k = 0; k < groups; ++k) {
      const float* xg = x + g + 128 * k;
      uint8_t* pg = packed + (g + 128 * k) / 2;
      for (int half = 0; half < 8; half += 4) {  // 4 blocks, 64 codes, packed together
        // With the maxima kept, this loop is the first to read x: no software prefetch (2 KiB ahead into L1,
        // or 4 KiB and 32 KiB into L2, as the maxima pass asks: 0-15 % slower on Zen 4, which
        // streams this read on its own hardware prefetchers).
        if (reciprocalsUsable[k]) {
          __m256i codeBytes[2], nearest = _mm256_set1_epi32(-1);
          for (int pair = 0; pair < 2; ++pair) {  // 2 blocks, 32 codes
            __m256i xb[4], p[4];
            for (int v = 0; v < 4; ++v) {
              const int j = half + 2 * pair + v / 2;
              xb[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xg + 16 * j + 8 * (v % 2)));
              const __m256 product = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(xb[v], l.absMask)),
                                                   _mm256_broadcast_ss(&reciprocals[k][j]));
              p[v] = _mm256_max_epu32(_mm256_castps_si256(product), codeZeroFloor);
              nearest = _mm256_min_epu32(nearest, _mm256_and_si256(_mm256_add_epi32(p[v], nearStart), nearStartBits));
            }
            codeBytes[pair] = e2m1CodeBytes(p, xb, keys);
          }
          if (!_mm256_movemask_epi8(_mm256_cmpeq_epi32(nearest, _mm256_setzero_si256()))) {
            storeNibbleBytes64(codeBytes[0], codeBytes[1], pg + 8 * half);
            continue;
          }
        }
        __m256i c[8];
        for (int b = 0; b < 4; ++b) {
          const int j = half + b;
          // Divided, not multiplied by a reciprocal: the definition's rounding.
          const __m256 fj = _mm256_broadcast_ss(&divisors[k][j]);
          const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xg + 16 * j));
          const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xg + 16 * j + 8));
          const __m256i y0 = _mm256_castps_si256(_mm256_div_ps(_mm256_castsi256_ps(_mm256_and_si256(x0, l.absMask)), fj));
          const __m256i y1 = _mm256_castps_si256(_mm256_div_ps(_mm256_castsi256_ps(_mm256_and_si256(x1, l.absMask)), fj));
          c[2 * b] = e2m1Codes(y0, x0, l);
          c[2 * b + 1] = e2m1Codes(y1, x1, l);
        }
        storeNibbles64(c, pg + 8 * half);
      }
      for (unsigned z = zero[k]; z; z &= z - 1) std::memset(pg + 8 * static_cast<size_t>(__builtin_ctz(z)), 0, 8);
      for (unsigned s = sat[k]; s; s &= s - 1) {
        const size_t j = static_cast<size_t>(__builtin_ctz(s));
        const __m256 fj = _mm256_broadcast_ss(&divisors[k][j]);
        for (size_t half = 0; half < 16; half += 8) {
          const __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xg + 16 * j + half)), l.absMask);
          const __m256i y = _mm256_castps_si256(_mm256_div_ps(_mm256_castsi256_ps(a), fj));
          saturated += static_cast<uint64_t>(
              __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(y, atOverflow))))));
        }
      }
    }
    g += 128 * groups;
    if (nonFinite) break;
  }
  return g;
}

// elementCodesUncounted for one format known at compile time: its shifts as immediates (a shift by a
// register count is two micro-ops on Intel cores, and the counts held two registers of the sixteen, so the
// group encoder's constants spilled), and without the test of a >= the largest value: the rounding is
// monotonic in a, so every such a rounds to the largest code or above it, and the final minimum caps it.
template <int kMantBits, int kBits>
inline __m256i elementCodesOf(__m256 v, const ElementLanes& l) {
  const __m256i xb = _mm256_castps_si256(v);
  const __m256i a = _mm256_and_si256(xb, l.absMask);
  const __m256i sign = _mm256_srli_epi32(_mm256_andnot_si256(l.absMask, xb), 32 - kBits);
  const __m256i sub =
      _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), l.magic)), l.magicBits);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 23 - kMantBits), l.one);
  const __m256i nor = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, l.rebias), odd), 23 - kMantBits);
  const __m256i code = _mm256_blendv_epi8(nor, sub, _mm256_cmpgt_epi32(l.minNormal, a));  // a < min normal
  return _mm256_or_si256(sign, _mm256_min_epu32(code, l.maxCode));
}

// MX with its standard 32-element blocks, 8 blocks (256 elements) per step, as the AVX-512 group encoder
// does 16: the maxima by one transposing reduction (after a maximum of each block's four vectors), the 8
// shared scales in one register, each block's codes from its four vectors with the factor broadcast from
// a stored lane, and saturation counted only in the blocks whose scaled maximum reaches the overflow
// midpoint. encodeBlocks paid a horizontal maximum, a scalar scale rule, a test of a zero factor and a
// saturation count per vector. Stops before a last partial group or a group whose maximum is not finite;
// returns the elements encoded.
template <int kMantBits, int kBits>
size_t encodeMxGroups(const float* x, size_t n, const ElementSpec& s, uint8_t* packed, uint8_t* scaleCodes,
                      uint64_t& saturated) {
  constexpr size_t kBlock = 32, kGroupValues = kBlock * 8;
  const ElementLanes l = lanesFor(s);
  const __m256i emax = _mm256_set1_epi32(s.emax), inverseBias = _mm256_set1_epi32(254);
  const __m256i maxFinite = _mm256_set1_epi32(0x7f7fffff), atOverflow = _mm256_sub_epi32(l.overflow, l.one);
  size_t g = 0;
  for (; g + kGroupValues <= n; g += kGroupValues) {
    const float* xg = x + g;
    __m256i m[8];
    for (int j = 0; j < 8; ++j) m[j] = laneMaxAbsBits(xg + kBlock * j, kBlock);
    const __m256i amax = laneMaxima8(m);
    if (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(amax, maxFinite)))) break;
    // mxSharedScaleCode: floor(log2 amax) - emax + 127 clamped at 0 is the exponent field less emax for a
    // normal amax; a subnormal or zero amax (field 0) gives 0, as the clamp at -127 does (emax >= 1).
    const __m256i codes = _mm256_max_epi32(_mm256_sub_epi32(_mm256_srli_epi32(amax, 23), emax), _mm256_setzero_si256());
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(scaleCodes + g / kBlock), _mm_packus_epi16(w, w));
    // mxInverseScale: 2^(127 - code), exact products with x.
    const __m256 factors = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(inverseBias, codes), 23));
    alignas(32) float f[8];
    _mm256_store_ps(f, factors);
    for (int j = 0; j < 8; ++j) {
      const float* b = xg + kBlock * j;
      // The input 4 KiB ahead, a line per pair of vectors, spread over the codes' arithmetic (as the
      // AVX-512 encoders ask, where one burst per group stalled on the line fill buffers).
      prefetchFloats(x, g + kBlock * j + 1024, g + kBlock * j + 1056, PrefetchInto::L1);
      const __m256 fj = _mm256_set1_ps(f[j]);
      __m256i c[4];
      for (int k = 0; k < 4; ++k)
        c[k] = elementCodesOf<kMantBits, kBits>(_mm256_mul_ps(_mm256_loadu_ps(b + 8 * k), fj), l);
      uint8_t* out = packed + (g + kBlock * j) * kBits / 8;
      store16(c[0], c[1], kBits, out);
      store16(c[2], c[3], kBits, out + 16 * kBits / 8);
    }
    // Saturation: a block's largest scaled magnitude is its maximum's (the product is monotonic).
    const __m256i scaledMax = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(amax), factors));
    for (unsigned sat = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(scaledMax, atOverflow))));
         sat; sat &= sat - 1) {
      const size_t j = static_cast<size_t>(__builtin_ctz(sat));
      const __m256 fj = _mm256_set1_ps(f[j]);
      for (size_t k = 0; k < kBlock; k += 8)
        saturated += saturatedLanes(_mm256_mul_ps(_mm256_loadu_ps(xg + kBlock * j + k), fj), l);
    }
  }
  return g;
}

// encodeMxGroups for fmt's code width and mantissa.
size_t encodeMxGroupsOf(ElementFormat fmt, const float* x, size_t n, uint8_t* packed, uint8_t* scaleCodes,
                        uint64_t& saturated) {
  const ElementSpec s = elementSpec(fmt);
  switch (fmt) {
    case ElementFormat::E4M3: return encodeMxGroups<3, 8>(x, n, s, packed, scaleCodes, saturated);
    case ElementFormat::E5M2: return encodeMxGroups<2, 8>(x, n, s, packed, scaleCodes, saturated);
    case ElementFormat::E2M3: return encodeMxGroups<3, 6>(x, n, s, packed, scaleCodes, saturated);
    case ElementFormat::E3M2: return encodeMxGroups<2, 6>(x, n, s, packed, scaleCodes, saturated);
    case ElementFormat::E2M1: return encodeMxGroups<1, 4>(x, n, s, packed, scaleCodes, saturated);
  }
  return 0;
}

// ---------------------------------------------------------------- decode

// 8 6-bit codes from 6 bytes: lane k takes the two bytes that hold bits 6k..6k+5 (from byte 6k / 8), as
// one 16-bit word shifted down by 6k mod 8 and masked.
inline __m256i unpack8Sixes(const uint8_t* in) {
  // Only the group's 6 bytes (the last group may end the payload), as a 4- and a 2-byte load joined in
  // registers: a 6-byte memcpy into an 8-byte word went through the stack, and its reload, which store
  // forwarding cannot serve from two narrower stores, stalled the decoder (25 ms per 16M values, against 5 as it is).
  uint32_t low;
  uint16_t high;
  std::memcpy(&low, in, sizeof low);
  std::memcpy(&high, in + 4, sizeof high);
  const uint64_t word = low | (static_cast<uint64_t>(high) << 32);
  const __m128i pairs = _mm_shuffle_epi8(_mm_cvtsi64_si128(static_cast<long long>(word)),
                                         _mm_setr_epi8(0, 1, 0, 1, 1, 2, 2, 3, 3, 4, 3, 4, 4, 5, 5, 6));
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_cvtepu16_epi32(pairs), _mm256_setr_epi32(0, 6, 4, 2, 0, 6, 4, 2)),
                          _mm256_set1_epi32(0x3f));
}

// 8 codes from packed bytes, one per 32-bit lane: 8 bytes, 6 bytes of 6-bit codes, or 4 bytes of two
// 4-bit codes (low nibble first).
inline __m256i unpack8(const uint8_t* in, int bits) {
  if (bits == 8) return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in)));
  if (bits == 6) return unpack8Sixes(in);
  uint32_t word;
  std::memcpy(&word, in, sizeof word);
  // Each byte to two lanes, the odd lane's shifted down by 4, both masked to a nibble.
  const __m128i pairs = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(word)),
                                         _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1));
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_cvtepu8_epi32(pairs), _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)),
                          _mm256_set1_epi32(0xf));
}

// The values of 8 E2M1 codes: the magnitude's 8 values looked up in a register, the sign bit moved to
// bit 31 (code 8 is -0, as the table's).
inline __m256 e2m1Values(__m256i c, __m256 magnitudes) {
  const __m256 v = _mm256_permutevar8x32_ps(magnitudes, c);  // the index's low 3 bits
  return _mm256_xor_ps(v, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(8)), 28)));
}

// out (=|+=) value(code) x factorOf(block) over the whole blocks, as the portable decodeScaled: one
// product per element (and one sum).
template <typename FactorOf>
size_t decodeBlocks(const uint8_t* packed, size_t n, size_t blockSize, ElementFormat fmt, float* out, bool accumulate,
                    FactorOf&& factorOf) {
  const ElementSpec s = elementSpec(fmt);
  const size_t bits = static_cast<size_t>(s.bits), blocks = n / blockSize;
  alignas(32) float e2m1[8];
  for (int c = 0; c < 8; ++c) e2m1[c] = elementToFloat(static_cast<uint8_t>(c), s, fmt);
  const __m256 magnitudes = _mm256_load_ps(e2m1);
  for (size_t block = 0; block < blocks; ++block) {
    const size_t b0 = block * blockSize;
    const __m256 f = _mm256_set1_ps(factorOf(block));
    for (size_t i = b0; i < b0 + blockSize; i += 8) {
      const __m256i c = unpack8(packed + i * bits / 8, s.bits);
      __m256 y = _mm256_mul_ps(fmt == ElementFormat::E2M1 ? e2m1Values(c, magnitudes) : elementValues(c, s), f);
      if (accumulate) {
        // The sum streams from memory: its line 4 KiB ahead, one per two vectors (as the AVX-512 decoder).
        if (i % 16 == 0) prefetchFloats(out, i + 1024, i + 1040, PrefetchInto::L1);
        y = _mm256_add_ps(_mm256_loadu_ps(out + i), y);
      }
      _mm256_storeu_ps(out + i, y);
    }
  }
  return blocks * blockSize;
}

}  // namespace

size_t decodeMxBlocksPacked(const uint8_t* packed, size_t n, size_t blockSize, ElementFormat fmt,
                            const uint8_t* scaleCodes, float* out, bool accumulate) {
  return decodeBlocks(packed, n, blockSize, fmt, out, accumulate,
                      [&](size_t block) { return e8m0ToFloat(scaleCodes[block]); });
}

size_t decodeNvfp4BlocksPacked(const uint8_t* packed, size_t n, size_t blockSize, const uint8_t* scaleCodes, float t,
                               float* out, bool accumulate) {
  return decodeBlocks(packed, n, blockSize, ElementFormat::E2M1, out, accumulate,
                      [&](size_t block) { return nvfp4BlockFactor(scaleCodes[block], t); });
}

BlocksEncoded encodeMxBlocksPacked(const float* x, size_t n, size_t blockSize, ElementFormat fmt, uint8_t* packed,
                                   uint8_t* scaleCodes, uint64_t* firstBad) {
  const ElementSpec s = elementSpec(fmt);
  // The standard 32-element blocks go through the group encoder; the rest (a last partial group, another
  // block size, a group holding NaN/Inf, which encodeBlocks reports) through encodeBlocks.
  BlocksEncoded r;
  const size_t done = blockSize == 32 ? encodeMxGroupsOf(fmt, x, n, packed, scaleCodes, r.saturated) : 0;
  if (done == n) {
    r.done = n;
    return r;
  }
  uint64_t bad = ~uint64_t{0};
  const BlocksEncoded rest = encodeBlocks<false>(
      x + done, n - done, blockSize, lanesFor(s), packed + done * static_cast<size_t>(s.bits) / 8,
      scaleCodes + done / blockSize, firstBad ? &bad : nullptr,
      [&](const uint32_t* maxBits, size_t count, uint8_t* codes, float* factors) {
        for (size_t j = 0; j < count; ++j) {
          codes[j] = mxSharedScaleCode(bitsToFloat(maxBits[j]), s);
          factors[j] = mxInverseScale(codes[j]);  // x / 2^e as the exact product with 2^-e
        }
      });
  if (firstBad && bad != ~uint64_t{0}) *firstBad = done + bad;
  r.saturated += rest.saturated;
  r.done = done + rest.done;
  return r;
}

uint32_t nvfp4BlockMaxBits(const float* x, size_t n, uint32_t* maxBits) {
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff);
  __m256i acc = _mm256_setzero_si256();
  size_t g = 0;
  for (; g + 128 <= n; g += 128) {
    __m256i m[8];
    for (int j = 0; j < 8; ++j) {
      // The tensor's first read from memory: each line asked for 4 KiB ahead into L1 and 32 KiB ahead
      // into L2, as the AVX-512 pass does (the reduction between the loads keeps fewer misses in flight).
      prefetchFloats(x, g + 1024 + 16 * j, g + 1040 + 16 * j, PrefetchInto::L1);
      prefetchFloats(x, g + 8192 + 16 * j, g + 8208 + 16 * j, PrefetchInto::L2);
      m[j] = _mm256_max_epu32(_mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + g + 16 * j)), absMask),
                              _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + g + 16 * j + 8)), absMask));
    }
    const __m256i b = laneMaxima8(m);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(maxBits + g / 16), b);
    acc = _mm256_max_epu32(acc, b);
  }
  __m128i h = _mm_max_epu32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
  uint32_t largest = static_cast<uint32_t>(_mm_cvtsi128_si32(h));
  for (; g < n; g += 16) {
    uint32_t m = 0;
    for (size_t i = g; i < std::min(n, g + 16); ++i) m = std::max(m, absBits(x[i]));
    maxBits[g / 16] = m;
    largest = std::max(largest, m);
  }
  return largest;
}

BlocksEncoded encodeNvfp4BlocksPacked(const float* x, size_t n, size_t blockSize, float t, uint8_t* packed,
                                      uint8_t* scaleCodes, uint64_t* firstBad,
                                      const uint32_t* blockMaxBits) {
  // The standard 16-element blocks go through the group encoder; the rest (a last partial group, another
  // block size, a group holding NaN/Inf, which encodeBlocks reports) through encodeBlocks.
  BlocksEncoded r;
  const size_t done = blockSize == 16 ? encodeNvfp4Groups(x, n, t, blockMaxBits, packed, scaleCodes, r.saturated) : 0;
  if (done == n) {
    r.done = n;
    return r;
  }
  // The scale rule on 8 blocks at a time in the lanes of the element conversion with E4M3's constants:
  // code = E4M3(amax / fl(6 t)) (nvfp4BlockScaleCode), factor = fl(E4M3 value x t) (nvfp4BlockFactor).
  // Per block in scalar code it costs about what the block's 16 elements do.
  const ElementSpec e4m3 = elementSpec(ElementFormat::E4M3);
  const ElementLanes scaleLanes = lanesFor(e4m3);
  const __m256 vSixT = _mm256_set1_ps(mulRn(kNvfp4ElementMax, t)), vT = _mm256_set1_ps(t);
  uint64_t bad = ~uint64_t{0};
  const BlocksEncoded rest = encodeBlocks<true>(
      x + done, n - done, blockSize, lanesFor(elementSpec(ElementFormat::E2M1)), packed + done / 2,
      scaleCodes + done / blockSize, firstBad ? &bad : nullptr,
      [&](const uint32_t* maxBits, size_t count, uint8_t* codes, float* factors) {
        for (size_t j = 0; j < count; j += 8) {
          // A short last group's missing lanes read 0 (a rep movs of a memcpy here cost 4 % of the encode).
          alignas(32) uint32_t amax[8] = {};
          for (size_t k = 0; k < 8 && j + k < count; ++k) amax[k] = maxBits[j + k];
          uint32_t unused = 0;  // a scale's saturation is not an element's
          const __m256i c = elementCodes(
              _mm256_div_ps(_mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(amax))), vSixT),
              scaleLanes, unused);
          alignas(32) uint32_t code[8];
          alignas(32) float factor[8];
          _mm256_store_si256(reinterpret_cast<__m256i*>(code), c);
          _mm256_store_ps(factor, _mm256_mul_ps(elementValues(c, e4m3), vT));
          for (size_t k = 0; k < 8 && j + k < count; ++k) {
            codes[j + k] = static_cast<uint8_t>(code[k]);
            factors[j + k] = factor[k];
          }
        }
      });
  if (firstBad && bad != ~uint64_t{0}) *firstBad = done + bad;
  r.saturated += rest.saturated;
  r.done = done + rest.done;
  return r;
}

}  // namespace gradcomp::cpu::avx2
#endif
