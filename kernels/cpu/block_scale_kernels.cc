#include "kernels/cpu/block_scale_kernels.h"

#include "kernels/cpu/avx2_block_steps.h"
#include "kernels/cpu/bit_pack.h"
#include "kernels/cpu/block_scale_kernels_avx512.h"
#include "kernels/cpu/cpu_path.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/scalar/scale_limits.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#define GRADCOMP_HAVE_AVX2 1
#endif

namespace gradcomp::cpu {

using namespace scalar;

float blockScale(float amax, float maxCode) { return blockScaleFor(amax, maxCode); }

float blockAmax(const float* x, size_t n) {
  uint32_t m = 0;
  size_t i = 0;
#ifdef GRADCOMP_HAVE_AVX2
  // Max of |x| bits (unsigned compare), 8 lanes, then a horizontal max: order-free, so exact. The line
  // 2 KiB ahead is asked for (a whole tensor's amax, NVFP4's first pass, is one long stream). (The same
  // loop on two chains with a prefetch per 16 values, no test per vector, made int8 nearest encode,
  // which streams its blocks from memory through here, slower: 3.96 -> 4.53 ms per 16M values.)
  i = n - n % 8;
  if (i) m = blockMaxAbsBitsAvx2(x, i);
#endif
  for (; i < n; ++i) m = std::max(m, absBits(x[i]));
  return bitsToFloat(m);
}

// Branch-free floatToFp8 for finite input so the loop vectorizes; tested equal to the scalar one.
static inline uint8_t fp8Lane(float v, const Fp8Spec& s, uint32_t maxBits) {
  const uint32_t xb = floatBits(v);
  const uint32_t sign = (xb >> 24) & 0x80u;
  const uint32_t a = xb & 0x7fffffffu;
  const uint32_t sub = floatBits(bitsToFloat(a) + s.subnormalMagic) - floatBits(s.subnormalMagic);
  const int shift = 23 - s.mantBits;
  const uint32_t odd = (a >> shift) & 1u;
  const uint32_t nor = (a + (static_cast<uint32_t>(s.bias - 127) << 23) + ((1u << (shift - 1)) - 1u) + odd) >> shift;
  uint32_t code = a < s.minNormalBits ? sub : nor;
  code = a >= maxBits ? s.maxCode : code;
  code = code > s.maxCode ? s.maxCode : code;
  return static_cast<uint8_t>(sign | code);
}

// Encodes consecutive blocks of x (the last may be short), writing one scale per block. Constants are
// set up once per call, not per block: at 128-element blocks that setup was a third of the time.
// kResidual: also residual[i] = x[i] - decodeFp8Block's value of codes[i].
// firstBad (given only without kResidual): set to the first NaN/Inf's index, the encoding stopped there.
template <bool kResidual>
static void encodeFp8Impl(const float* x, size_t n, size_t blockSize, Fp8Format fmt, uint8_t* codes, float* scales,
                          uint64_t& saturated, float* residual, size_t* firstBad = nullptr) {
  const Fp8Spec s = fp8Spec(fmt);
  const uint32_t maxBits = floatBits(s.maxValue);
  // A saturation is a value that would have rounded past the largest code: at or beyond the midpoint
  // between max and the next power of the format (448 + 16 for E4M3, 57344 + 4096 for E5M2).
  const uint32_t overflowBits = maxBits + (1u << (22 - s.mantBits));
  uint64_t sat = 0;
#if GRADCOMP_CPU_AVX512_KERNELS
  if (activeCpuPath() == CpuPath::Avx512) {
    // 16 lanes a step, tails masked (block_scale_kernels_avx512.cc), the residual's decode in the same lanes.
    saturated += avx512::encodeFp8Blocks(x, n, blockSize, s, overflowBits, codes, scales, firstBad,
                                         kResidual ? residual : nullptr);
    return;
  }
#endif
#ifdef GRADCOMP_HAVE_AVX2
  // fp8Lane on 8 lanes: the same integer steps, selects become blends.
  const int shift = 23 - s.mantBits;
  const __m256 magic = _mm256_set1_ps(s.subnormalMagic);
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff), one = _mm256_set1_epi32(1);
  const __m256i rebias = _mm256_set1_epi32(static_cast<int32_t>((static_cast<uint32_t>(s.bias - 127) << 23) +
                                                                ((1u << (shift - 1)) - 1u)));
  const __m256i minNormal = _mm256_set1_epi32(static_cast<int32_t>(s.minNormalBits));
  const __m256i maxCode = _mm256_set1_epi32(s.maxCode), overflow = _mm256_set1_epi32(static_cast<int32_t>(overflowBits - 1));
  const __m256i magicBits = _mm256_castps_si256(magic), signMask = _mm256_set1_epi32(0x80);
  const __m128i shiftCount = _mm_cvtsi32_si128(shift);
  // For kResidual: the decode constants (see decodeFp8Block).
  const __m256 vStep = _mm256_set1_ps(bitsToFloat(static_cast<uint32_t>(127 + 1 - s.bias - s.mantBits) << 23));
  const __m256i mantMask = _mm256_set1_epi32((1 << s.mantBits) - 1), zeroI = _mm256_setzero_si256();
  const __m256i expRebias = _mm256_set1_epi32((127 - s.bias) << 23);
  const __m128i mCount = _mm_cvtsi32_si128(s.mantBits), mantShift = _mm_cvtsi32_si128(23 - s.mantBits);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256i satLanes = _mm256_setzero_si256();  // per-lane counts (minus one per hit), summed at the end
  const bool vector = activeCpuPath() >= CpuPath::Avx2;  // scalar when a test or GRADCOMP_CPU_PATH asks
#endif
  for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) {
    const size_t len = std::min(blockSize, n - b0);
    const float* xb = x + b0;
    uint8_t* cb = codes + b0;
    const float amax = blockAmax(xb, len);
    if (firstBad && !isFiniteBits(floatBits(amax))) {
      size_t j = 0;
      while (isFiniteBits(absBits(xb[j]))) ++j;
      *firstBad = b0 + j;
      break;
    }
    const float scale = blockScale(amax, s.maxValue);
    scales[block] = scale;
    size_t i = 0;
#ifdef GRADCOMP_HAVE_AVX2
    const __m256 vScale = _mm256_set1_ps(scale), vInv = _mm256_set1_ps(1.0f / scale);
    auto codes8 = [&](const float* p) {
      const __m256 xv = _mm256_loadu_ps(p);
      const __m256i xi = _mm256_castps_si256(_mm256_mul_ps(xv, vScale));
      const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(xi, 24), signMask);
      const __m256i a = _mm256_and_si256(xi, absMask);
      const __m256i sub = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), magic)), magicBits);
      const __m256i odd = _mm256_and_si256(_mm256_srl_epi32(a, shiftCount), one);
      const __m256i nor = _mm256_srl_epi32(_mm256_add_epi32(_mm256_add_epi32(a, rebias), odd), shiftCount);
      const __m256i isSub = _mm256_cmpgt_epi32(minNormal, a);  // a < minNormal (both < 2^31)
      const __m256i code = _mm256_min_epu32(_mm256_blendv_epi8(nor, sub, isSub), maxCode);
      satLanes = _mm256_add_epi32(satLanes, _mm256_cmpgt_epi32(a, overflow));  // -1 per saturation
      if constexpr (kResidual) {
        // decodeFp8Block's arithmetic on the codes still in 32-bit lanes, subtracted from x.
        const __m256i e = _mm256_srl_epi32(code, mCount);
        const __m256i mant = _mm256_and_si256(code, mantMask);
        const __m256i normal = _mm256_or_si256(_mm256_add_epi32(_mm256_slli_epi32(e, 23), expRebias),
                                               _mm256_sll_epi32(mant, mantShift));
        const __m256i subBits = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mant), vStep));
        const __m256i bits = _mm256_or_si256(_mm256_blendv_epi8(normal, subBits, _mm256_cmpeq_epi32(e, zeroI)),
                                             _mm256_slli_epi32(sign, 24));
        const __m256 dec = _mm256_mul_ps(_mm256_castsi256_ps(bits), vInv);
        _mm256_storeu_ps(residual + (p - x), _mm256_sub_ps(xv, dec));
      }
      return _mm256_or_si256(code, sign);
    };
    // 32 lanes per step: two packs (32 -> 16 -> 8 bits) interleave the four vectors by 128-bit lane;
    // one dword permute restores element order for a single 32-byte store.
    for (; vector && i + 32 <= len; i += 32) {
      const __m256i ab = _mm256_packus_epi32(codes8(xb + i), codes8(xb + i + 8));
      const __m256i cd = _mm256_packus_epi32(codes8(xb + i + 16), codes8(xb + i + 24));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(cb + i), _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order));
    }
    for (; vector && i + 8 <= len; i += 8) {
      const __m256i code = codes8(xb + i);
      const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(cb + i), _mm_packus_epi16(w, w));
    }
#endif
    for (size_t j = i; j < len; ++j) {
      const float v = xb[j] * scale;
      sat += absBits(v) >= overflowBits;  // only possible when the scale was capped or neutral
      cb[j] = fp8Lane(v, s, maxBits);
    }
    if constexpr (kResidual) {
      if (i < len) {
        float* rb = residual + b0;
        decodeFp8Block(cb + i, len - i, fmt, scale, rb + i, false);
        for (size_t j = i; j < len; ++j) rb[j] = xb[j] - rb[j];
      }
    }
  }
#ifdef GRADCOMP_HAVE_AVX2
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), satLanes);
  for (int32_t l : lanes) sat += static_cast<uint64_t>(-static_cast<int64_t>(l));
#endif
  saturated += sat;
}

float encodeFp8Block(const float* x, size_t n, Fp8Format fmt, uint8_t* codes, uint64_t& saturated) {
  float scale = 1.0f;
  encodeFp8Impl<false>(x, n, std::max<size_t>(n, 1), fmt, codes, &scale, saturated, nullptr);
  return scale;
}

float encodeFp8BlockResidual(const float* x, size_t n, Fp8Format fmt, uint8_t* codes, uint64_t& saturated,
                             float* residual) {
  float scale = 1.0f;
  encodeFp8Impl<true>(x, n, std::max<size_t>(n, 1), fmt, codes, &scale, saturated, residual);
  return scale;
}

void encodeFp8Blocks(const float* x, size_t n, size_t blockSize, Fp8Format fmt, uint8_t* codes, float* scales,
                     uint64_t& saturated, float* residual) {
  if (residual)
    encodeFp8Impl<true>(x, n, blockSize, fmt, codes, scales, saturated, residual);
  else
    encodeFp8Impl<false>(x, n, blockSize, fmt, codes, scales, saturated, nullptr);
}

size_t encodeFp8BlocksChecked(const float* x, size_t n, size_t blockSize, Fp8Format fmt, uint8_t* codes, float* scales,
                              uint64_t& saturated) {
  size_t firstBad = n;
  encodeFp8Impl<false>(x, n, blockSize, fmt, codes, scales, saturated, nullptr, &firstBad);
  return firstBad;
}

void decodeFp8Block(const uint8_t* codes, size_t n, Fp8Format fmt, float scale, float* out, bool accumulate) {
  const Fp8Spec s = fp8Spec(fmt);
  const float inv = 1.0f / scale;
  const int m = s.mantBits;
  const float step = bitsToFloat(static_cast<uint32_t>(127 + 1 - s.bias - m) << 23);
  size_t i = 0;
#ifdef GRADCOMP_HAVE_AVX2
  const __m256 vInv = _mm256_set1_ps(inv), vStep = _mm256_set1_ps(step);
  const __m256i signBit = _mm256_set1_epi32(0x80), magMask = _mm256_set1_epi32(0x7f);
  const __m256i mantMask = _mm256_set1_epi32((1 << m) - 1), zero = _mm256_setzero_si256();
  const __m256i expRebias = _mm256_set1_epi32((127 - s.bias) << 23);
  const __m128i mCount = _mm_cvtsi32_si128(m), mantShift = _mm_cvtsi32_si128(23 - m);
  for (; i + 8 <= n; i += 8) {
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, signBit), 24);
    const __m256i e = _mm256_srl_epi32(_mm256_and_si256(c, magMask), mCount);
    const __m256i mant = _mm256_and_si256(c, mantMask);
    const __m256i normal = _mm256_or_si256(_mm256_add_epi32(_mm256_slli_epi32(e, 23), expRebias), _mm256_sll_epi32(mant, mantShift));
    const __m256i sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mant), vStep));
    const __m256i bits = _mm256_or_si256(_mm256_blendv_epi8(normal, sub, _mm256_cmpeq_epi32(e, zero)), sign);
    __m256 v = _mm256_mul_ps(_mm256_castsi256_ps(bits), vInv);
    if (accumulate) {
      // The sum streams from memory: its lines 4 KiB ahead, one per two vectors (the hardware prefetchers
      // alone left fp8 decode-accumulate at 1.2-1.45x memcpy on the Xeon of 2026-12-04).
      if (i % 16 == 0) prefetchFloats(out, i + 1024, i + 1040, PrefetchInto::L1);
      v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
    }
    _mm256_storeu_ps(out + i, v);
  }
#endif
  for (; i < n; ++i) {
    const uint32_t c = codes[i];
    const uint32_t sign = (c & 0x80u) << 24;
    const uint32_t e = (c & 0x7fu) >> m;
    const uint32_t mant = c & ((1u << m) - 1u);
    const uint32_t normal = sign | ((e + 127u - static_cast<uint32_t>(s.bias)) << 23) | (mant << (23 - m));
    const uint32_t sub = sign | floatBits(static_cast<float>(mant) * step);
    const float v = bitsToFloat(e == 0 ? sub : normal) * inv;
    out[i] = accumulate ? out[i] + v : v;
  }
}

// First byte with (b & mask) == value: a branch-free OR over 256-byte chunks (vectorized by the
// compiler), and the exact position searched only inside a chunk that has one.
static size_t firstMaskedByte(const uint8_t* p, size_t n, uint8_t mask, uint8_t value) {
  constexpr size_t kChunk = 256;
  for (size_t base = 0; base < n; base += kChunk) {
    const size_t end = std::min(n, base + kChunk);
    uint8_t any = 0;
    for (size_t i = base; i < end; ++i) any |= static_cast<uint8_t>((p[i] & mask) == value);
    if (any)
      for (size_t i = base; i < end; ++i)
        if ((p[i] & mask) == value) return i;
  }
  return n;
}

size_t firstNonFiniteFp8(const uint8_t* codes, size_t n, Fp8Format fmt) {
  // E4M3: S.1111.111 is NaN; E5M2: S.11111.xx is Inf or NaN.
  return fmt == Fp8Format::E4M3 ? firstMaskedByte(codes, n, 0x7f, 0x7f) : firstMaskedByte(codes, n, 0x7c, 0x7c);
}

size_t firstInt8Minimum(const int8_t* codes, size_t n) {
  return firstMaskedByte(reinterpret_cast<const uint8_t*>(codes), n, 0xff, 0x80);
}

size_t firstInt4Minimum(const uint8_t* packed, size_t n) {
  // As firstMaskedByte: a branch-free OR over 256-byte chunks, the position searched only in a chunk that
  // has one. A last odd element's byte has a zero high nibble, so whole bytes can be tested.
  constexpr size_t kChunk = 256;
  const size_t bytes = (n + 1) / 2;
  for (size_t base = 0; base < bytes; base += kChunk) {
    const size_t end = std::min(bytes, base + kChunk);
    uint8_t any = 0;
    for (size_t i = base; i < end; ++i)
      any |= static_cast<uint8_t>(((packed[i] & 0x0fu) == 0x08u) | ((packed[i] & 0xf0u) == 0x80u));
    if (any)
      for (size_t i = base; i < end; ++i) {
        if ((packed[i] & 0x0fu) == 0x08u) return 2 * i;
        if ((packed[i] & 0xf0u) == 0x80u && 2 * i + 1 < n) return 2 * i + 1;
      }
  }
  return n;
}

// The scalar reference of encodeSymmetricIntBlock's codes (and the vector paths' tails).
// residual (when given): x - code x fl(1 / scale), decodeInt8Block's value subtracted.
static void finishSymmetricInt(const float* x, size_t n, float scale, float top, const RoundingFields& uniforms,
                               int8_t* codes, float* residual) {
  // One loop per rounding, so that each stays branch-free (the portable build's whole encoder).
  const auto finish = [&](auto round) {
    for (size_t i = 0; i < n; ++i) codes[i] = static_cast<int8_t>(std::clamp(round(i), -top, top));
  };
  if (uniforms.drawn())
    finish([&](size_t i) { return std::floor(x[i] * scale + uniforms.uniform(i)); });
  else
    finish([&](size_t i) { return std::nearbyint(x[i] * scale); });
  if (residual) {
    const float inv = 1.0f / scale;
    for (size_t i = 0; i < n; ++i) residual[i] = x[i] - static_cast<float>(codes[i]) * inv;
  }
}

#if GRADCOMP_CPU_AVX512_KERNELS
// A block's codes (and residual) for its scale on the AVX-512 path: 16 lanes at a time, the scalar rule
// for the tail.
static void symmetricIntCodesAvx512(const float* x, size_t n, float scale, float top, const RoundingFields& uniforms,
                                    int8_t* codes, float* residual) {
  const size_t i0 = avx512::symmetricIntCodes(x, n, scale, top, uniforms, codes, residual);
  finishSymmetricInt(x + i0, n - i0, scale, top, uniforms.from(i0), codes + i0, residual ? residual + i0 : nullptr);
}
#endif

#ifdef GRADCOMP_HAVE_AVX2
// Scaled values rounded as the scalar loop rounds them before the clamp, stochastic: floor(x s + u). The
// nearest rounding's callers pass x s as it is to the conversion, whose own rounding (to nearest even
// under the default rounding mode, as nearbyint) is the scalar rule's: a clamp to integer bounds commutes
// with rounding to nearest, and the vroundps it saves is two micro-ops on Intel cores.
static inline __m256 stochasticRounded(__m256 scaled, __m256 u) { return _mm256_floor_ps(_mm256_add_ps(scaled, u)); }

// The uniforms of elements i .. i + 7 of `u`, widened from their kBits-bit fields (kBits 8 or 16).
template <int kBits>
static inline __m256 uniforms8(const RoundingFields& u, size_t i) {
  return uniformsOfFields8<kBits>(u.bytesAt(i));
}

// A block's codes (and residual) for its scale on the AVX2 path: 8 lanes at a time, the scalar rule for
// the tail. kFinite: the block holds no NaN/Inf (every caller but encodeSymmetricIntBlock without its
// nonFinite check has made sure), so its scaled values are in range for the byte-domain clamp below.
// kBits: the uniforms' field width (8 or 16), 0 for nearest rounding.
template <bool kFinite, int kBits>
static void symmetricIntCodesAvx2OfWidth(const float* x, size_t n, float scale, float top,
                                         const RoundingFields& uniforms, int8_t* codes, float* residual) {
  const int maxCode = static_cast<int>(top);
  size_t i0 = 0;
  // The scalar loop's roundings (stochasticRounded, or nearest), then the clamp. Packed with signed
  // saturation (the values are already within +-maxCode).
  const __m256 vScale = _mm256_set1_ps(scale), lo = _mm256_set1_ps(-top), hi = _mm256_set1_ps(top);
  const __m256 vInv = _mm256_set1_ps(1.0f / scale);
  const auto integerCodes = [&](size_t i) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 scaled = _mm256_mul_ps(v, vScale);
    __m256 q = scaled;
    if constexpr (kBits != 0) q = stochasticRounded(scaled, uniforms8<kBits>(uniforms, i));
    const __m256i qi = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(q, lo), hi));
    // The code's value as the decoder forms it, from the integer code (+0 for code 0: the rounded float
    // is -0 for x = -0, and x - (-0) is +0 where the definition's x - (+0) is -0).
    if (residual) _mm256_storeu_ps(residual + i, _mm256_sub_ps(v, _mm256_mul_ps(_mm256_cvtepi32_ps(qi), vInv)));
    return qi;
  };
  // 32 codes a store: two in-lane packs of pairs, one more, and a dword permute back to element order
  // (5 instructions where four 8-code stores took 16; int8 stochastic encode, AVX2 path, docs/notes.md
  // twenty-fourth part).
  if (kFinite && maxCode == 127 && !residual) {
    // int8 without a residual clamps in the byte domain, once per 32 codes instead of twice per 8: the
    // rounded values lie in [-128, 128] (|x s| is at most a few ulps above 127, blockScaleFor, plus a
    // uniform in (0, 1)), the packs saturate 128 to 127, and a byte maximum takes -128 to -127: the codes
    // of the clamp then the conversion (int8 stochastic encode: docs/notes.md, twenty-fifth part).
    const auto rounded = [&](size_t i) {
      const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(x + i), vScale);
      if constexpr (kBits != 0) return _mm256_cvtps_epi32(stochasticRounded(scaled, uniforms8<kBits>(uniforms, i)));
      return _mm256_cvtps_epi32(scaled);
    };
    for (; i0 + 32 <= n; i0 += 32) {
      const __m256i a = rounded(i0), b = rounded(i0 + 8), c = rounded(i0 + 16), d = rounded(i0 + 24);
      storeInt8CodeBytes32(a, b, c, d, codes + i0);
    }
  }
  for (; i0 + 32 <= n; i0 += 32) {
    // Named, so that the residuals are stored in element order (function arguments are unsequenced).
    const __m256i a = integerCodes(i0), b = integerCodes(i0 + 8), c = integerCodes(i0 + 16), d = integerCodes(i0 + 24);
    storeCodeBytes32(packedCodeBytes32(a, b, c, d), codes + i0);
  }
  for (; i0 + 8 <= n; i0 += 8) {
    const __m256i qi = integerCodes(i0);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(qi), _mm256_extracti128_si256(qi, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i0), _mm_packs_epi16(w, w));
  }
  finishSymmetricInt(x + i0, n - i0, scale, top, uniforms.from(i0), codes + i0, residual ? residual + i0 : nullptr);
}

template <bool kFinite>
static void symmetricIntCodesAvx2(const float* x, size_t n, float scale, float top, const RoundingFields& uniforms,
                                  int8_t* codes, float* residual) {
  withFieldWidth(uniforms, [&](auto bits) {
    symmetricIntCodesAvx2OfWidth<kFinite, decltype(bits)::value>(x, n, scale, top, uniforms, codes, residual);
  });
}
#endif

float encodeSymmetricIntBlock(const float* x, size_t n, int maxCode, const RoundingFields& uniforms, int8_t* codes,
                              bool* nonFinite, float* residual) {
  const float top = static_cast<float>(maxCode);
#if GRADCOMP_CPU_AVX512_KERNELS
  // From 128 values a block (int8's default 256): below, the two calls per block cost what the wider
  // lanes save (int4's 64-value blocks measured no faster), and the AVX2 loop below stays.
  if (n >= 128 && activeCpuPath() == CpuPath::Avx512) {
    // Nearest rounding without a residual reads x from memory with nothing else to wait on (stochastic
    // rounding asks for the next tile while it draws the uniforms; error feedback's x is a g + e in L1):
    // the lines 4 KiB ahead are asked for, as the AVX2 block maximum asks 2 KiB ahead. On the Xeon of
    // 2026-12-04 (slow memory) int8 encode went 11.0-12.1 -> 5.1-6.2 ms per 16M values.
    if (!uniforms.drawn() && !residual) prefetchFloats(x, 1024, 1024 + n, PrefetchInto::L1);
    const uint32_t amaxBits = avx512::maxAbsBits(x, n);
    if (nonFinite && !isFiniteBits(amaxBits)) {
      *nonFinite = true;
      return 0.0f;
    }
    const float scale = blockScale(bitsToFloat(amaxBits), top);
    symmetricIntCodesAvx512(x, n, scale, top, uniforms, codes, residual);
    return scale;
  }
#endif
  const float amax = blockAmax(x, n);
  if (nonFinite && !isFiniteBits(floatBits(amax))) {
    *nonFinite = true;
    return 0.0f;
  }
  const float scale = blockScale(amax, top);
#ifdef GRADCOMP_HAVE_AVX2
  if (activeCpuPath() >= CpuPath::Avx2) {
    // A NaN/Inf block (only without the nonFinite check; its scale is 1) keeps the clamp on lanes: +Inf,
    // or a value beyond the int32 range beside it, converts to INT32_MIN, which the byte clamp would read
    // as -127 where the lane clamp gives the scalar path's 127.
    if (isFiniteBits(floatBits(amax))) symmetricIntCodesAvx2<true>(x, n, scale, top, uniforms, codes, residual);
    else symmetricIntCodesAvx2<false>(x, n, scale, top, uniforms, codes, residual);
    return scale;
  }
#endif
  finishSymmetricInt(x, n, scale, top, uniforms, codes, residual);
  return scale;
}

#ifdef GRADCOMP_HAVE_AVX2
// Eight values' int4 codes (encodeSymmetricIntBlock's AVX2 steps: the same roundings, the same clamp), two's
// complement in 4 bits, one per 32-bit lane; u: their uniforms (kStochastic).
template <bool kStochastic>
static inline __m256i int4Codes(const float* x, __m256 u, __m256 vScale, __m256 lo, __m256 hi) {
  const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(x), vScale);
  const __m256 q = kStochastic ? stochasticRounded(scaled, u) : scaled;
  return _mm256_and_si256(_mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(q, lo), hi)), _mm256_set1_epi32(0xf));
}

// int4 with its standard 64-value blocks, 8 blocks (512 values) per step, as the AVX-512 group encoder does
// 16: the maxima by one transposing reduction (after a maximum of each block's eight vectors), the 8 scales
// by blockScaleFor's rules in one register (one division for the 8; its raise by ulps never applies with 7,
// block_scale_kernels_avx512.cc), the codes of each block with the scale broadcast from a stored lane.
// Stops before a last partial group or a group whose maximum is not finite (left to the loop below, which
// finds the first NaN/Inf); returns the values encoded. kBits: the uniforms' field width, 0 for nearest.
template <int kBits>
static size_t encodeInt4GroupsAvx2(const float* x, size_t n, const RoundingFields& uniforms, float* scales,
                                   uint8_t* packed) {
  constexpr bool kStochastic = kBits != 0;
  constexpr size_t kBlock = 64, kGroupValues = kBlock * 8;
  const __m256 seven = _mm256_set1_ps(7.0f);
  const __m256i maxFinite = _mm256_set1_epi32(0x7f7fffff);
  size_t g = 0;
  for (; g + kGroupValues <= n; g += kGroupValues) {
    const float* xg = x + g;
    __m256i m[8];
    for (int j = 0; j < 8; ++j) {
      const float* b = xg + kBlock * j;
      // The first read of x streams from memory: each line 4 KiB ahead (stochastic rounding asks for the
      // next tile while it draws the uniforms).
      if constexpr (!kStochastic) prefetchFloats(x, g + kBlock * j + 1024, g + kBlock * j + 1088, PrefetchInto::L1);
      m[j] = laneMaxAbsBits(b, kBlock);
    }
    const __m256i amaxBits = laneMaxima8(m);
    if (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(amaxBits, maxFinite)))) break;
    // blockScaleFor: 7 / amax correctly rounded; a quotient that overflows -> FLT_MAX; amax 0 -> 1.
    __m256 s = _mm256_div_ps(seven, _mm256_castsi256_ps(amaxBits));
    s = _mm256_blendv_ps(s, _mm256_set1_ps(FLT_MAX),
                         _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_castps_si256(s), _mm256_set1_epi32(0x7f800000))));
    s = _mm256_blendv_ps(s, _mm256_set1_ps(1.0f), _mm256_castsi256_ps(_mm256_cmpeq_epi32(amaxBits, _mm256_setzero_si256())));
    _mm256_storeu_ps(scales + g / kBlock, s);
    // A block's 64 codes rounded on 8 lanes, clamped and packed at once (storeClampedNibbles64: the
    // clamp and the 4-bit mask on 2 vectors of bytes instead of 8 of lanes, and 14 packing instructions
    // where four storeNibbles16 take 36; int4 stochastic encode: docs/notes.md, twenty-fifth part).
    for (size_t j = 0; j < 8; ++j) {
      const __m256 vScale = _mm256_set1_ps(scales[g / kBlock + j]);
      const size_t b0 = g + kBlock * j;
      __m256i c[8];
      for (size_t k = 0; k < 8; ++k) {
        // Clamped after the conversion (storeClampedNibbles64), which commutes with its rounding to nearest.
        const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(x + b0 + 8 * k), vScale);
        if constexpr (kStochastic) c[k] = _mm256_cvtps_epi32(stochasticRounded(scaled, uniforms8<kBits>(uniforms, b0 + 8 * k)));
        else c[k] = _mm256_cvtps_epi32(scaled);
      }
      storeClampedNibbles64(c, 7, packed + b0 / 2);
    }
  }
  return g;
}

// encodeInt4Blocks for blocks of a multiple of 8 values, fused: codes go straight from registers to the
// packed payload (the portable path writes an int8 code per value to a scratch array, masks it and packs
// it in two more passes over memory). As the AVX-512 kernel, 16 blocks at a time in three phases (maxima,
// scales, codes), so one block's dependent chain overlaps the next blocks' loads. Returns the values done:
// the whole blocks (a short last block is left to the portable path), or n after a NaN/Inf (firstBad set).
template <int kBits>
static size_t encodeInt4BlocksAvx2(const float* x, size_t n, size_t blockSize, const RoundingFields& uniforms,
                                   float* scales, uint8_t* packed, uint64_t* firstBad) {
  constexpr bool kStochastic = kBits != 0;
  const __m256 lo = _mm256_set1_ps(-7.0f), hi = _mm256_set1_ps(7.0f);
  constexpr size_t kGroup = 16;
  uint32_t maxBits[kGroup];
  const size_t blocks = n / blockSize;
  for (size_t g0 = 0; g0 < blocks; g0 += kGroup) {
    const size_t count = blocks - g0 < kGroup ? blocks - g0 : kGroup;
    for (size_t j = 0; j < count; ++j) maxBits[j] = blockMaxAbsBitsAvx2(x + (g0 + j) * blockSize, blockSize);
    if (firstBad) {
      for (size_t j = 0; j < count; ++j) {
        if (!isFiniteBits(maxBits[j])) {
          const size_t b0 = (g0 + j) * blockSize;
          *firstBad = b0 + firstNonFiniteIndex(x + b0, blockSize);
          return n;
        }
      }
    }
    for (size_t j = 0; j < count; ++j) scales[g0 + j] = blockScaleFor(bitsToFloat(maxBits[j]), 7.0f);
    for (size_t j = 0; j < count; ++j) {
      const size_t b0 = (g0 + j) * blockSize;
      const __m256 vScale = _mm256_set1_ps(scales[g0 + j]);
      auto codes = [&](size_t i) {
        __m256 u = _mm256_setzero_ps();
        if constexpr (kStochastic) u = uniforms8<kBits>(uniforms, i);
        return int4Codes<kStochastic>(x + i, u, vScale, lo, hi);
      };
      size_t i = b0;
      for (; i + 16 <= b0 + blockSize; i += 16) storeNibbles16(codes(i), codes(i + 8), packed + i / 2);
      if (i < b0 + blockSize) storeNibbles8(codes(i), packed + i / 2);  // a block of 16 k + 8 values
    }
  }
  return blocks * blockSize;
}
#endif

void encodeInt4Blocks(const float* x, size_t n, size_t blockSize, const RoundingFields& tileUniforms, float* scales,
                      uint8_t* packed, uint64_t* firstBad) {
  RoundingFields uniforms = tileUniforms;  // advanced with x past what the vector routes encode
#if GRADCOMP_CPU_AVX512_KERNELS
  if (blockSize % 16 == 0 && activeCpuPath() == CpuPath::Avx512) {
    // The AVX-512 kernel assumes finite input: the scan is a pass of its own there (a vectorized maximum;
    // the position searched only when it reaches Inf).
    if (firstBad && !isFiniteBits(floatBits(blockAmax(x, n)))) {
      *firstBad = firstNonFiniteIndex(x, n);
      return;
    }
    return avx512::encodeInt4Blocks(x, n, blockSize, uniforms, scales, packed);
  }
#endif
  size_t offset = 0;  // of x within the caller's x: where the AVX2 blocks stopped
#ifdef GRADCOMP_HAVE_AVX2
  if (blockSize % 8 == 0 && activeCpuPath() >= CpuPath::Avx2) {
    // The standard 64-value blocks through the group encoder first.
    if (blockSize == 64) {
      const size_t grouped = withFieldWidth(uniforms, [&](auto bits) {
        return encodeInt4GroupsAvx2<decltype(bits)::value>(x, n, uniforms, scales, packed);
      });
      offset = grouped;
      x += grouped;
      n -= grouped;
      scales += grouped / blockSize;
      packed += grouped / 2;
      uniforms = uniforms.from(grouped);
    }
    // (A NaN/Inf it finds is reported relative to the x it was given.)
    uint64_t bad = ~uint64_t{0};
    const size_t done = withFieldWidth(uniforms, [&](auto bits) {
      return encodeInt4BlocksAvx2<decltype(bits)::value>(x, n, blockSize, uniforms, scales, packed,
                                                         firstBad ? &bad : nullptr);
    });
    if (bad != ~uint64_t{0}) *firstBad = offset + bad;
    if (done == n) return;
    // The short last block (done is a multiple of 8, so its first value starts a byte).
    offset += done;
    x += done;
    n -= done;
    scales += done / blockSize;
    packed += done / 2;
    uniforms = uniforms.from(done);
  }
#endif
  thread_local std::vector<int8_t> buffer;
  if (buffer.size() < n) buffer.resize(n);
  int8_t* codes = buffer.data();  // local: see decodeInt4Blocks
  for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) {
    const size_t len = std::min(blockSize, n - b0);
    bool nonFinite = false;
    scales[block] = encodeSymmetricIntBlock(x + b0, len, 7, uniforms.from(b0), codes + b0,
                                            firstBad ? &nonFinite : nullptr);
    if (nonFinite) {
      *firstBad = offset + b0 + firstNonFiniteIndex(x + b0, len);
      return;
    }
  }
  auto* nibbles = reinterpret_cast<uint8_t*>(codes);
  for (size_t i = 0; i < n; ++i) nibbles[i] &= 0xfu;  // two's complement in 4 bits
  packBits(nibbles, n, 4, packed);
}

void decodeInt4Blocks(const uint8_t* packed, size_t n, size_t blockSize, const float* scales, float* out,
                      bool accumulate) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (blockSize % 16 == 0 && activeCpuPath() == CpuPath::Avx512)
    return avx512::decodeInt4Blocks(packed, n, blockSize, scales, out, accumulate);
#endif
  thread_local std::vector<uint8_t> buffer;
  if (buffer.size() < n) buffer.resize(n);
  // A local pointer: byte stores through the vector's own would make the compiler reload its data pointer
  // (a thread-local) on every iteration and leave the loop scalar (measured 6x slower).
  uint8_t* nibbles = buffer.data();
  unpackBits(packed, n, 4, nibbles);
  auto* codes = reinterpret_cast<int8_t*>(nibbles);
  for (size_t i = 0; i < n; ++i) codes[i] = static_cast<int8_t>(nibbles[i] >= 8 ? nibbles[i] - 16 : nibbles[i]);
  for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block)
    decodeInt8Block(codes + b0, std::min(blockSize, n - b0), scales[block], out + b0, accumulate);
}

float encodeInt8Block(const float* x, size_t n, const RoundingFields& uniforms, int8_t* codes, bool* nonFinite,
                      float* residual) {
  return encodeSymmetricIntBlock(x, n, 127, uniforms, codes, nonFinite, residual);
}

// encodeSymmetricIntBlock's steps for int8, phase by phase over groups of kGroup blocks: the maxima
// (groupMaxima(g0, count, maxBits)), the scales, then the codes (blockCodes(b0, len, scale)), so that
// each block's chain of dependent steps (its maximum, a division, the codes) overlaps its neighbours'.
// Returns the values encoded: n, or the first block with a NaN/Inf.
template <size_t kGroup, class GroupMaxima, class BlockCodes>
static size_t encodeInt8Groups(size_t n, size_t blockSize, float* scales, GroupMaxima&& groupMaxima,
                               BlockCodes&& blockCodes) {
  uint32_t maxBits[kGroup];
  for (size_t g0 = 0; g0 < n; g0 += kGroup * blockSize) {
    const size_t count = std::min(kGroup, (n - g0 + blockSize - 1) / blockSize);
    groupMaxima(g0, count, maxBits);
    size_t finite = 0;  // blocks before the first non-finite one
    while (finite < count && isFiniteBits(maxBits[finite])) ++finite;
    for (size_t j = 0; j < finite; ++j) scales[g0 / blockSize + j] = blockScale(bitsToFloat(maxBits[j]), 127.0f);
    for (size_t j = 0; j < finite; ++j) {
      const size_t b0 = g0 + j * blockSize;
      blockCodes(b0, std::min(blockSize, n - b0), scales[g0 / blockSize + j]);
    }
    if (finite < count) return g0 + finite * blockSize;
  }
  return n;
}

size_t encodeInt8Blocks(const float* x, size_t n, size_t blockSize, const RoundingFields& uniforms, float* scales,
                        int8_t* codes, float* residual) {
  // The grouped phases where the input is in cache: stochastic rounding prefetched the tile as it drew the
  // uniforms, error feedback's x is a g + e tile. Nearest rounding without a residual reads memory block by
  // block below, its next block's lines asked for as it goes (phased on AVX-512, 3.8-4.0 -> 4.0-4.1 ms).
  [[maybe_unused]] const auto codesWith = [&](auto blockCodes) {
    return [&, blockCodes](size_t b0, size_t len, float scale) {
      blockCodes(x + b0, len, scale, 127.0f, uniforms.from(b0), codes + b0, residual ? residual + b0 : nullptr);
    };
  };
#if GRADCOMP_CPU_AVX512_KERNELS
  // From 128 values a block, as encodeSymmetricIntBlock: int8 stochastic encode 8.5-8.7 -> 7.8-8.2 ms per
  // 16M values on the Xeon of 2026-12-04.
  if (blockSize >= 128 && (uniforms.drawn() || residual) && activeCpuPath() == CpuPath::Avx512)
    return encodeInt8Groups<16>(n, blockSize, scales, [&](size_t g0, size_t count, uint32_t* maxBits) {
      for (size_t j = 0; j < count; ++j)
        maxBits[j] = avx512::maxAbsBits(x + g0 + j * blockSize, std::min(blockSize, n - g0 - j * blockSize));
    }, codesWith(symmetricIntCodesAvx512));
#endif
#ifdef GRADCOMP_HAVE_AVX2
  // Up to 8 blocks a group (the codec's tiles hold 4 of the default 256 values), their maxima by one
  // transposing reduction (a horizontal maximum per block, a block at a time, had the block maximum at
  // 14-19 % of int8 stochastic encode's time in cache: docs/notes.md, twenty-fifth part).
  if (blockSize % 8 == 0 && (uniforms.drawn() || residual) && activeCpuPath() == CpuPath::Avx2)
    return encodeInt8Groups<8>(n, blockSize, scales, [&](size_t g0, size_t count, uint32_t* maxBits) {
      __m256i m[8];
      for (size_t j = 0; j < 8; ++j) {
        const size_t b0 = g0 + j * blockSize, len = j < count ? std::min(blockSize, n - b0) : 0;
        m[j] = len == blockSize ? laneMaxAbsBits(x + b0, len)  // a short block (the last): its maximum in every lane
                                : _mm256_set1_epi32(static_cast<int32_t>(len ? floatBits(blockAmax(x + b0, len)) : 0u));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(maxBits), laneMaxima8(m));
    }, codesWith(symmetricIntCodesAvx2<true>));  // the groups stop before a block with a NaN/Inf
#endif
  for (size_t b0 = 0; b0 < n; b0 += blockSize) {
    const size_t len = std::min(blockSize, n - b0);
    bool nonFinite = false;
    scales[b0 / blockSize] = encodeInt8Block(x + b0, len, uniforms.from(b0), codes + b0, &nonFinite,
                                             residual ? residual + b0 : nullptr);
    if (nonFinite) return b0;
  }
  return n;
}

void decodeInt8Block(const int8_t* codes, size_t n, float scale, float* out, bool accumulate) {
  const float inv = 1.0f / scale;
  size_t i = 0;
#ifdef GRADCOMP_HAVE_AVX2
  const __m256 vInv = _mm256_set1_ps(inv);
  for (; i + 8 <= n; i += 8) {
    const __m256i c = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(c), vInv);
    if (accumulate) {
      if (i % 16 == 0) prefetchFloats(out, i + 1024, i + 1040, PrefetchInto::L1);  // as decodeFp8Block
      v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
    }
    _mm256_storeu_ps(out + i, v);
  }
#endif
  for (; i < n; ++i) {
    const float v = static_cast<float>(codes[i]) * inv;
    out[i] = accumulate ? out[i] + v : v;
  }
}

size_t decodeInt8BlocksChecked(const int8_t* codes, size_t n, size_t blockSize, const float* scales,
                               const scalar::ScaleRule& rule, float* out, bool streamOut) {
#ifdef GRADCOMP_HAVE_AVX2
  // Streamed where every block's vectors start on a 16-byte boundary of out (malloc's alignment), as two
  // 16-byte non-temporal stores (they fill the same write-combining line as one of 32 bytes would).
  streamOut = streamOut && blockSize % 8 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
#else
  (void)streamOut;  // only the vector path streams
#endif
  for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) {
    const size_t len = std::min(blockSize, n - b0);
    if (!scalar::scaleAccepted(scales[block], rule)) return b0;
    const float inv = 1.0f / scales[block];
    const int8_t* c = codes + b0;
    float* o = out + b0;
    size_t i = 0;
#ifdef GRADCOMP_HAVE_AVX2
    const __m256 vInv = _mm256_set1_ps(inv);
    const __m128i minimum = _mm_set1_epi8(INT8_MIN);
    __m128i seen = _mm_setzero_si128();  // lanes where a code was -128
    const auto decoded = [&](size_t k) {
      const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + k));
      seen = _mm_or_si128(seen, _mm_cmpeq_epi8(raw, minimum));
      return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw)), vInv);
    };
    if (streamOut)
      for (; i + 8 <= len; i += 8) {
        const __m256 v = decoded(i);
        _mm_stream_ps(o + i, _mm256_castps256_ps128(v));
        _mm_stream_ps(o + i + 4, _mm256_extractf128_ps(v, 1));
      }
    else
      for (; i + 8 <= len; i += 8) _mm256_storeu_ps(o + i, decoded(i));
    if (!_mm_testz_si128(seen, seen)) return b0 + firstInt8Minimum(c, len);
#endif
    for (; i < len; ++i) {
      if (c[i] == INT8_MIN) return b0 + i;
      o[i] = static_cast<float>(c[i]) * inv;
    }
  }
  return n;
}

}  // namespace gradcomp::cpu
