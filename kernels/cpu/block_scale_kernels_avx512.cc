// The fp8 and symmetric-int block encoders' lanes on AVX-512: block_scale_kernels.cc's AVX2 steps on 16
// lanes, narrowed to bytes by vpmovdb / vpmovsdb. The target attribute (not a file-wide flag) keeps
// the build runnable on CPUs without AVX-512; cpu_path.h decides at run time.
#include "kernels/cpu/block_scale_kernels_avx512.h"

#include <cfloat>

#include "kernels/cpu/avx512_intrinsics.h"
#include "kernels/cpu/avx512_block_steps.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/scalar/scale_limits.h"

#if GRADCOMP_CPU_AVX512_KERNELS
namespace gradcomp::cpu::avx512 {

GRADCOMP_AVX512 uint32_t maxAbsBits(const float* x, size_t n) {
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff);
  __m512i acc = _mm512_setzero_si512();
  size_t i = 0;
  if (n >= 4096) {
    // A whole tensor's amax (NVFP4's first pass, a rotated tensor's scale) is one long read that the
    // hardware prefetchers alone leave at about 0.65x of memcpy's time; each line 4 KiB ahead asked for
    // and four independent maxima bring it to about 0.5x (the block maxima, short, skip this).
    __m512i acc1 = acc, acc2 = acc, acc3 = acc;
    for (; i + 64 <= n; i += 64) {
      prefetchFloats(x, i + 1024, i + 1088, PrefetchInto::L1);
      acc = _mm512_max_epu32(acc, _mm512_and_si512(_mm512_loadu_si512(x + i), absMask));
      acc1 = _mm512_max_epu32(acc1, _mm512_and_si512(_mm512_loadu_si512(x + i + 16), absMask));
      acc2 = _mm512_max_epu32(acc2, _mm512_and_si512(_mm512_loadu_si512(x + i + 32), absMask));
      acc3 = _mm512_max_epu32(acc3, _mm512_and_si512(_mm512_loadu_si512(x + i + 48), absMask));
    }
    acc = _mm512_max_epu32(_mm512_max_epu32(acc, acc1), _mm512_max_epu32(acc2, acc3));
  }
  for (; i + 16 <= n; i += 16) acc = _mm512_max_epu32(acc, _mm512_and_si512(_mm512_loadu_si512(x + i), absMask));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    acc = _mm512_max_epu32(acc, _mm512_and_si512(_mm512_maskz_loadu_epi32(m, x + i), absMask));
  }
  return _mm512_reduce_max_epu32(acc);
}

namespace {
GRADCOMP_AVX512 inline __m512i absSumBits(const float* g, const float* e, __m512i absMask) {
  return _mm512_and_si512(_mm512_castps_si512(_mm512_add_ps(_mm512_loadu_ps(g), _mm512_loadu_ps(e))), absMask);
}
}  // namespace

GRADCOMP_AVX512 uint32_t maxAbsBitsOfSum(const float* g, const float* e, size_t n) {
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff);
  const auto absSum = [&](size_t i) GRADCOMP_AVX512_LAMBDA { return absSumBits(g + i, e + i, absMask); };
  __m512i acc = _mm512_setzero_si512(), acc1 = acc, acc2 = acc, acc3 = acc;
  size_t i = 0;
  // Two streams: the hardware prefetchers keep up with them (a software prefetch measured no faster).
  for (; i + 64 <= n; i += 64) {
    acc = _mm512_max_epu32(acc, absSum(i));
    acc1 = _mm512_max_epu32(acc1, absSum(i + 16));
    acc2 = _mm512_max_epu32(acc2, absSum(i + 32));
    acc3 = _mm512_max_epu32(acc3, absSum(i + 48));
  }
  acc = _mm512_max_epu32(_mm512_max_epu32(acc, acc1), _mm512_max_epu32(acc2, acc3));
  for (; i + 16 <= n; i += 16) acc = _mm512_max_epu32(acc, absSum(i));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 sum = _mm512_add_ps(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, e + i));
    acc = _mm512_max_epu32(acc, _mm512_and_si512(_mm512_castps_si512(sum), absMask));
  }
  return _mm512_reduce_max_epu32(acc);
}

GRADCOMP_AVX512 uint64_t encodeFp8Blocks(const float* x, size_t n, size_t blockSize, const scalar::Fp8Spec& s,
                                         uint32_t overflowBits, uint8_t* codes, float* scales, size_t* firstBad,
                                         float* residual) {
  const int shift = 23 - s.mantBits;
  const __m512 magic = _mm512_set1_ps(s.subnormalMagic);
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff), one = _mm512_set1_epi32(1);
  const __m512i rebias = _mm512_set1_epi32(static_cast<int32_t>((static_cast<uint32_t>(s.bias - 127) << 23) +
                                                                ((1u << (shift - 1)) - 1u)));
  const __m512i minNormal = _mm512_set1_epi32(static_cast<int32_t>(s.minNormalBits));
  const __m512i maxCode = _mm512_set1_epi32(s.maxCode);
  const __m512i overflow = _mm512_set1_epi32(static_cast<int32_t>(overflowBits - 1));
  const __m512i magicBits = _mm512_castps_si512(magic), signMask = _mm512_set1_epi32(0x80);
  const __m128i shiftCount = _mm_cvtsi32_si128(shift);
  // For the residual: decodeFp8Block's arithmetic (value bits x fl(1 / scale)) on the codes in their lanes.
  const __m512 vStep = _mm512_set1_ps(scalar::bitsToFloat(static_cast<uint32_t>(127 + 1 - s.bias - s.mantBits) << 23));
  const __m512i mantMask = _mm512_set1_epi32((1 << s.mantBits) - 1);
  const __m512i expRebias = _mm512_set1_epi32((127 - s.bias) << 23);
  const __m128i mantCount = _mm_cvtsi32_si128(s.mantBits), mantShift = _mm_cvtsi32_si128(23 - s.mantBits);
  uint64_t sat = 0;
  // fp8Lane on 16 lanes (the AVX2 loop's integer steps), `m` the lanes that exist.
  auto lanes = [&](const float* p, __mmask16 m, __m512 vScale, __m512 vInverse, uint8_t* out) GRADCOMP_AVX512_LAMBDA {
    const __m512 xv = _mm512_maskz_loadu_ps(m, p);
    const __m512i xi = _mm512_castps_si512(_mm512_mul_ps(xv, vScale));
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(xi, 24), signMask);
    const __m512i a = _mm512_and_si512(xi, absMask);
    const __m512i sub = _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), magic)), magicBits);
    const __m512i odd = _mm512_and_si512(_mm512_srl_epi32(a, shiftCount), one);
    const __m512i nor = _mm512_srl_epi32(_mm512_add_epi32(_mm512_add_epi32(a, rebias), odd), shiftCount);
    const __mmask16 isSub = _mm512_cmplt_epu32_mask(a, minNormal);
    const __m512i code = _mm512_min_epu32(_mm512_mask_blend_epi32(isSub, nor, sub), maxCode);
    sat += static_cast<uint64_t>(__builtin_popcount(static_cast<unsigned>(_mm512_mask_cmpgt_epu32_mask(m, a, overflow))));
    _mm_mask_storeu_epi8(out, m, _mm512_cvtepi32_epi8(_mm512_or_si512(code, sign)));
    if (residual) {
      const __m512i e = _mm512_srl_epi32(code, mantCount), mant = _mm512_and_si512(code, mantMask);
      const __m512i normal =
          _mm512_or_si512(_mm512_add_epi32(_mm512_slli_epi32(e, 23), expRebias), _mm512_sll_epi32(mant, mantShift));
      const __m512i subnormal = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(mant), vStep));
      const __mmask16 isZeroExp = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());
      const __m512i bits = _mm512_or_si512(_mm512_mask_blend_epi32(isZeroExp, normal, subnormal), _mm512_slli_epi32(sign, 24));
      const __m512 decoded = _mm512_mul_ps(_mm512_castsi512_ps(bits), vInverse);
      _mm512_mask_storeu_ps(residual + (p - x), m, _mm512_sub_ps(xv, decoded));
    }
  };
  // Without a residual the input streams from memory (with one it is error feedback's g + e, in L1):
  // each block's lines are asked for 4 KiB ahead, as the MX / NVFP4 encoders do. Where memory is slow
  // (the Xeon of 2026-12-04, a 64 MiB memcpy of 7-10 ms) the hardware prefetchers alone left fp8 encode
  // at 1.7-1.9x memcpy.
  const bool streaming = residual == nullptr;
  for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) {
    const size_t len = blockSize < n - b0 ? blockSize : n - b0;
    const float* xb = x + b0;
    if (streaming) prefetchFloats(x, b0 + 1024, b0 + 1024 + len, PrefetchInto::L1);
    const uint32_t amaxBits = maxAbsBits(xb, len);
    if (firstBad && !scalar::isFiniteBits(amaxBits)) {
      size_t j = 0;
      while (scalar::isFiniteBits(scalar::absBits(xb[j]))) ++j;
      *firstBad = b0 + j;
      return sat;
    }
    const float scale = scalar::blockScaleFor(scalar::bitsToFloat(amaxBits), s.maxValue);
    scales[block] = scale;
    const __m512 vScale = _mm512_set1_ps(scale), vInverse = _mm512_set1_ps(1.0f / scale);
    size_t i = 0;
    for (; i + 16 <= len; i += 16) lanes(xb + i, 0xffff, vScale, vInverse, codes + b0 + i);
    if (i < len) lanes(xb + i, static_cast<__mmask16>((1u << (len - i)) - 1u), vScale, vInverse, codes + b0 + i);
  }
  return sat;
}

namespace {

// symmetricIntCodes at the uniforms' field width kBits (8 or 16; 0: nearest rounding).
template <int kBits>
GRADCOMP_AVX512 size_t symmetricIntCodesOfWidth(const float* x, size_t n, float scale, float maxCode,
                                                const RoundingFields& uniforms, int8_t* codes, float* residual) {
  const __m512 vScale = _mm512_set1_ps(scale), lo = _mm512_set1_ps(-maxCode), hi = _mm512_set1_ps(maxCode);
  const __m512 vInv = _mm512_set1_ps(1.0f / scale);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 scaled = _mm512_mul_ps(v, vScale);
    // Clamped first, then rounded by the conversion's own rounding (floor(x s + u), or to nearest even):
    // a clamp to integer bounds commutes with either rounding, and a vrndscaleps is two micro-ops.
    __m512 sum = scaled;
    if constexpr (kBits != 0) sum = _mm512_add_ps(scaled, uniformsOfFields16<kBits>(uniforms.bytesAt(i)));
    const __m512 clamped = _mm512_min_ps(_mm512_max_ps(sum, lo), hi);
    const __m512i q = kBits != 0 ? _mm512_cvt_roundps_epi32(clamped, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
                                 : _mm512_cvt_roundps_epi32(clamped, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // Within +-127: the signed narrowing never saturates.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtsepi32_epi8(q));
    // The code's value (from the integer code: +0 for code 0, where the rounded float is -0 for x = -0)
    // x inv is the decoder's product (two roundings, no FMA).
    if (residual) _mm512_storeu_ps(residual + i, _mm512_sub_ps(v, _mm512_mul_ps(_mm512_cvtepi32_ps(q), vInv)));
  }
  return i;
}

}  // namespace

GRADCOMP_AVX512 size_t symmetricIntCodes(const float* x, size_t n, float scale, float maxCode,
                                         const RoundingFields& uniforms, int8_t* codes, float* residual) {
  return withFieldWidth(uniforms, [&](auto bits) {
    return symmetricIntCodesOfWidth<decltype(bits)::value>(x, n, scale, maxCode, uniforms, codes, residual);
  });
}

namespace {

// 16 values' int4 codes, one per 32-bit lane: x x scale (+ u) clamped to +-7, then rounded by the
// conversion itself (to nearest even, or down: a clamp to integer bounds commutes with either), two's
// complement in 4 bits.
template <bool kStochastic>
GRADCOMP_AVX512 inline __m512i int4CodeLanes(__m512 scaled, __m512 u) {
  const __m512 clamped = _mm512_min_ps(_mm512_max_ps(kStochastic ? _mm512_add_ps(scaled, u) : scaled, _mm512_set1_ps(-7.0f)),
                                       _mm512_set1_ps(7.0f));
  const __m512i q = kStochastic ? _mm512_cvt_roundps_epi32(clamped, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
                                : _mm512_cvt_roundps_epi32(clamped, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_and_si512(q, _mm512_set1_epi32(0xf));
}

// The same codes as bytes of packed nibbles (8 bytes): in each 64-bit lane the odd element's nibble (bits
// 32..35) moves beside the even one's (bits 4..7) and vpmovqb keeps each lane's low byte.
template <bool kStochastic>
GRADCOMP_AVX512 inline __m128i int4Nibbles(__m512 scaled, __m512 u) {
  const __m512i c = int4CodeLanes<kStochastic>(scaled, u);
  return _mm512_cvtepi64_epi8(_mm512_or_si512(c, _mm512_srli_epi64(c, 28)));
}

// int4 with its standard 64-value blocks, 16 blocks (1024 values, a codec tile) per step: the maxima by
// one transposing reduction (after a maximum of each block's four vectors), the 16 scales by
// blockScaleFor's rules in one register (one division for the 16), the codes of two blocks at a time from
// their eight vectors with each scale broadcast from a stored lane, packed together. Per block, the loop
// below paid a horizontal maximum and two scalar divisions. Stops before a last partial group; returns the
// elements encoded. kBits: the uniforms' field width (8 or 16), 0 for nearest rounding.
template <int kBits>
GRADCOMP_AVX512 size_t encodeInt4Groups(const float* x, size_t n, const RoundingFields& uniforms, float* scales,
                                        uint8_t* packed) {
  constexpr bool kStochastic = kBits != 0;
  constexpr size_t kBlock = 64, kGroupValues = kBlock * 16;
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff), infBits = _mm512_set1_epi32(0x7f800000);
  const __m512 seven = _mm512_set1_ps(7.0f), one = _mm512_set1_ps(1.0f);
  size_t g = 0;
  for (; g + kGroupValues <= n; g += kGroupValues) {
    const float* xg = x + g;
    __m512i m[16];
    for (int j = 0; j < 16; ++j) {
      const float* b = xg + kBlock * j;
      m[j] = _mm512_max_epu32(
          _mm512_max_epu32(_mm512_and_si512(_mm512_loadu_si512(b), absMask), _mm512_and_si512(_mm512_loadu_si512(b + 16), absMask)),
          _mm512_max_epu32(_mm512_and_si512(_mm512_loadu_si512(b + 32), absMask),
                           _mm512_and_si512(_mm512_loadu_si512(b + 48), absMask)));
    }
    const __m512i amaxBits = laneMaxima16(m);
    const __m512 amax = _mm512_castsi512_ps(amaxBits);
    // blockScaleFor: 7 / amax correctly rounded; a quotient that overflows -> FLT_MAX; amax 0 or not
    // finite -> 1.
    __m512 s = _mm512_div_ps(seven, amax);
    s = _mm512_mask_mov_ps(s, _mm512_cmpeq_epi32_mask(_mm512_castps_si512(s), infBits), _mm512_set1_ps(FLT_MAX));
    const __mmask16 special = _mm512_cmpeq_epi32_mask(amaxBits, _mm512_setzero_si512()) |
                              _mm512_cmpge_epu32_mask(amaxBits, infBits);
    s = _mm512_mask_mov_ps(s, special, one);
    // blockScaleFor's last rule, a scale raised by ulps until 7 x fl(1 / s) is finite, never applies with
    // 7: checked over every positive float (docs/notes.md), and the scales of the top binades and the
    // subnormals are pinned against the scalar rule by BlockKernelPaths.Int4GroupScalesAreBlockScaleFor.
    _mm512_storeu_ps(scales + g / kBlock, s);
    // Two blocks' 128 codes at a time, packed by storeNibbles8Vectors (12 instructions where a pair shift
    // and a vpmovqb per vector took 32).
    for (int j = 0; j < 16; j += 2) {
      __m512i c[8];
      for (int k = 0; k < 8; ++k) {
        const __m512 scale = _mm512_set1_ps(scales[g / kBlock + static_cast<size_t>(j + k / 4)]);
        const size_t i = g + kBlock * static_cast<size_t>(j) + 16 * static_cast<size_t>(k);
        // The input 4 KiB ahead, one line per vector of codes (stochastic rounding asks for the next
        // tile while it draws the uniforms).
        if constexpr (!kStochastic) prefetchFloats(x, i + 1024, i + 1040, PrefetchInto::L1);
        const __m512 scaled = _mm512_mul_ps(_mm512_loadu_ps(x + i), scale);
        __m512 u = _mm512_setzero_ps();
        if constexpr (kStochastic) u = uniformsOfFields16<kBits>(uniforms.bytesAt(i));
        c[k] = int4CodeLanes<kStochastic>(scaled, u);
      }
      storeNibbles8Vectors(c, packed + (g + kBlock * static_cast<size_t>(j)) / 2);
    }
  }
  return g;
}

// encodeInt4Blocks at the uniforms' field width kBits (8 or 16; 0: nearest rounding).
template <int kBits>
GRADCOMP_AVX512 void encodeInt4BlocksOfWidth(const float* x, size_t n, size_t blockSize, RoundingFields uniforms,
                                             float* scales, uint8_t* packed) {
  constexpr bool kStochastic = kBits != 0;
  // The standard 64-value blocks through the group encoder, the rest (a last partial group, another block
  // size) block by block below.
  if (blockSize == 64) {
    const size_t done = encodeInt4Groups<kBits>(x, n, uniforms, scales, packed);
    x += done;
    n -= done;
    scales += done / blockSize;
    packed += done / 2;
    uniforms = uniforms.from(done);
  }
  // 16 blocks at a time in three phases (maxima, scales, codes), so one block's dependent chain (a
  // horizontal maximum, a scalar division, a broadcast) overlaps the next blocks' work.
  constexpr size_t kGroup = 16;
  uint32_t maxBits[kGroup];
  const size_t blocks = (n + blockSize - 1) / blockSize;
  for (size_t g0 = 0; g0 < blocks; g0 += kGroup) {
    const size_t count = blocks - g0 < kGroup ? blocks - g0 : kGroup;
    for (size_t j = 0; j < count; ++j) {
      const size_t b0 = (g0 + j) * blockSize;
      maxBits[j] = maxAbsBits(x + b0, blockSize < n - b0 ? blockSize : n - b0);
    }
    for (size_t j = 0; j < count; ++j) scales[g0 + j] = scalar::blockScaleFor(scalar::bitsToFloat(maxBits[j]), 7.0f);
    for (size_t j = 0; j < count; ++j) {
      const size_t b0 = (g0 + j) * blockSize, len = blockSize < n - b0 ? blockSize : n - b0;
      const __m512 vScale = _mm512_set1_ps(scales[g0 + j]);
      for (size_t i = b0; i < b0 + len; i += 16) {
        // The input 4 KiB ahead, one line per vector of codes (as the MX encoders; stochastic rounding asks
        // for the next tile while it draws the uniforms): the block maxima are this group's first read.
        if constexpr (!kStochastic) prefetchFloats(x, i + 1024, i + 1040, PrefetchInto::L1);
        const size_t m = b0 + len - i < 16 ? b0 + len - i : 16;
        const __mmask16 lanes = static_cast<__mmask16>((1u << m) - 1u);
        // The lanes past the tensor's end load 0 and give the code 0: the zero high nibble of a last odd byte.
        const __m512 scaled = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, x + i), vScale);
        __m512 u = _mm512_setzero_ps();
        if constexpr (kStochastic) u = uniformsOfFields16<kBits>(uniforms.bytesAt(i), lanes);
        const __m128i bytes = int4Nibbles<kStochastic>(scaled, u);
        if (m == 16) {
          _mm_storel_epi64(reinterpret_cast<__m128i*>(packed + i / 2), bytes);
        } else {
          _mm_mask_storeu_epi8(packed + i / 2, static_cast<__mmask16>((1u << ((m + 1) / 2)) - 1u), bytes);
        }
      }
    }
  }
}

}  // namespace

GRADCOMP_AVX512 void encodeInt4Blocks(const float* x, size_t n, size_t blockSize, const RoundingFields& uniforms,
                                      float* scales, uint8_t* packed) {
  withFieldWidth(uniforms, [&](auto bits) {
    encodeInt4BlocksOfWidth<decltype(bits)::value>(x, n, blockSize, uniforms, scales, packed);
  });
}

GRADCOMP_AVX512 void decodeInt4Blocks(const uint8_t* packed, size_t n, size_t blockSize, const float* scales,
                                      float* out, bool accumulate) {
  for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) {
    const size_t len = blockSize < n - b0 ? blockSize : n - b0;
    const __m512 inv = _mm512_set1_ps(1.0f / scales[block]);  // decodeInt8Block's factor
    for (size_t i = b0; i < b0 + len; i += 16) {
      const size_t m = b0 + len - i < 16 ? b0 + len - i : 16;
      const __mmask16 valid = static_cast<__mmask16>((1u << m) - 1u);
      // Byte j to 64-bit lane j, its high nibble moved to bit 32: element 2j low, 2j + 1 high; each
      // nibble sign-extended from bit 3 by a shift up to bit 31 and an arithmetic shift back.
      const __m128i raw = m == 16 ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + i / 2))
                                  : _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << ((m + 1) / 2)) - 1u),
                                                         packed + i / 2);
      const __m512i q = _mm512_cvtepu8_epi64(raw);
      const __m512i nibbles = _mm512_or_si512(_mm512_and_si512(q, _mm512_set1_epi64(0xf)),
                                              _mm512_slli_epi64(_mm512_and_si512(q, _mm512_set1_epi64(0xf0)), 28));
      const __m512i codes = _mm512_srai_epi32(_mm512_slli_epi32(nibbles, 28), 28);
      __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(codes), inv);
      if (accumulate) {
        prefetchFloats(out, i + 1024, i + 1040, PrefetchInto::L1);  // the sum streams from memory
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

}  // namespace gradcomp::cpu::avx512
#endif
