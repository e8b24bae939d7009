#include "kernels/cpu/level_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#define GRADCOMP_HAVE_AVX2 1
#endif

#include "kernels/cpu/avx2_block_steps.h"
#include "kernels/cpu/bit_pack.h"
#include "kernels/cpu/block_scale_kernels.h"
#include "kernels/cpu/block_scale_kernels_avx512.h"
#include "kernels/cpu/cpu_path.h"
#include "kernels/cpu/level_kernels_avx512.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/rounding_fields.h"
#include "kernels/scalar/level_codes.h"

namespace gradcomp::cpu {

double blockSumSquares(const float* x, size_t n) {
  double lane[4] = {0, 0, 0, 0};
  size_t i = 0;
#ifdef GRADCOMP_HAVE_AVX2
  // The same order: lane j takes x[i+j] then x[i+4+j]; products of fp32 are exact in double.
  __m256d acc = _mm256_setzero_pd();
  for (; i + 8 <= n; i += 8) {
    const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    acc = _mm256_add_pd(acc, _mm256_mul_pd(lo, lo));
    acc = _mm256_add_pd(acc, _mm256_mul_pd(hi, hi));
  }
  _mm256_storeu_pd(lane, acc);
#endif
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) lane[j] += static_cast<double>(x[i + j]) * x[i + j];
  for (int j = 0; i < n; ++i, ++j) lane[j] += static_cast<double>(x[i]) * x[i];
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

float blockL2Norm(const float* x, size_t n, int levels) { return scalar::qsgdWireNorm(blockSumSquares(x, n), levels); }

#ifdef GRADCOMP_HAVE_AVX2
namespace {

// blockSumSquares of kBlocks consecutive whole blocks (blockSize % 8 == 0), one 4-lane accumulator each:
// the same order within every block (so the same bits), kBlocks independent addition chains instead of
// one, which is what bounds the single-block loop when its input is in cache. The caller has the input
// there (qsgd prefetches its tile while it draws the tile's uniforms). Eight chains keep both FMA pipes
// busy through the FMA's 4-cycle latency; four left half of them idle, and the AVX-512 loop's two blocks
// to a register (a permute per vector, and vcvtps2pd of 16 lanes is two micro-ops on Zen 4) was slower
// still: qsgd's sums 1.34 (AVX-512, 4 registers) / 1.12 (4 blocks) -> 0.67 ms per 16M values in L1/L2 on
// the Zen 4 of 2026-12-05 (docs/notes.md).
template <size_t kBlocks>
void sumSquaresOfBlockGroup(const float* p, size_t blockSize, double* sums) {
  __m256d acc[kBlocks];
  for (auto& a : acc) a = _mm256_setzero_pd();
  for (size_t i = 0; i < blockSize; i += 8)
    for (size_t k = 0; k < kBlocks; ++k) {
      const float* q = p + k * blockSize + i;
      const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(q)), hi = _mm256_cvtps_pd(_mm_loadu_ps(q + 4));
#if defined(__FMA__)
      // One rounding either way: the square of an fp32 is exact in double.
      acc[k] = _mm256_fmadd_pd(hi, hi, _mm256_fmadd_pd(lo, lo, acc[k]));
#else
      acc[k] = _mm256_add_pd(acc[k], _mm256_mul_pd(lo, lo));
      acc[k] = _mm256_add_pd(acc[k], _mm256_mul_pd(hi, hi));
#endif
    }
  for (size_t k = 0; k < kBlocks; ++k) {
    double lane[4];
    _mm256_storeu_pd(lane, acc[k]);
    sums[k] = (lane[0] + lane[1]) + (lane[2] + lane[3]);
  }
}

}  // namespace
#endif

void blockSumSquaresEach(const float* x, size_t n, size_t blockSize, double* sums) {
  const size_t blocks = (n + blockSize - 1) / blockSize;
  size_t b = 0;
#ifdef GRADCOMP_HAVE_AVX2
  // Whole blocks eight, then four at a time; streamed from memory, interleaved blocks read as that many
  // streams a block apart, which the AMD EPYC's prefetcher served worse than one (docs/notes.md), so the
  // caller brings the tile into cache first.
  if (blockSize % 8 == 0) {
    for (; (b + 8) * blockSize <= n; b += 8) sumSquaresOfBlockGroup<8>(x + b * blockSize, blockSize, sums + b);
    for (; (b + 4) * blockSize <= n; b += 4) sumSquaresOfBlockGroup<4>(x + b * blockSize, blockSize, sums + b);
  }
#endif
  for (; b < blocks; ++b) sums[b] = blockSumSquares(x + b * blockSize, std::min(blockSize, n - b * blockSize));
}

float encodeQsgdBlock(const float* x, size_t n, int bits, const float* uniforms, uint8_t* codes) {
  return encodeQsgdBlockOfSum(x, n, bits, blockSumSquares(x, n), uniforms, codes);
}

float encodeQsgdBlockOfSum(const float* x, size_t n, int bits, double sumSquares, const float* uniforms,
                           uint8_t* codes) {
  return encodeQsgdBlockOfNorm(x, n, bits, scalar::qsgdWireNorm(sumSquares, scalar::qsgdLevels(bits)), uniforms, codes);
}

#ifdef GRADCOMP_HAVE_AVX2
namespace {

// qsgdCode on 8 lanes for a norm whose ratio needs no pre-scaling (RatioScaling::pre == 1): floor, clamp
// to s, sign bit only for nonzero levels.
struct QsgdLanes {
  __m256 to, s, zero, absMask;
  __m256i signCode;
  QsgdLanes(float inv, int bits)
      : to(_mm256_set1_ps(inv)),
        s(_mm256_set1_ps(static_cast<float>(scalar::qsgdLevels(bits)))),
        zero(_mm256_setzero_ps()),
        absMask(_mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))),
        signCode(_mm256_set1_epi32(1 << (bits - 1))) {}
  // The codes of x[0 .. 7] with the uniforms of u's lanes, one per 32-bit lane.
  __m256i codes(const float* x, __m256 u) const {
    const __m256 v = _mm256_loadu_ps(x);
    // |x| inv + u is positive, so its floor is the truncating conversion's; capped at s first (for an
    // integral s, min(floor(a), s) = floor(min(a, s))): no vroundps, two micro-ops on Intel cores.
    const __m256i level =
        _mm256_cvttps_epi32(_mm256_min_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_and_ps(v, absMask), to), u), s));
    const __m256i negative =
        _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(v, zero, _CMP_LT_OQ)), _mm256_cmpgt_epi32(level, _mm256_setzero_si256()));
    // signbit(x) for x = -0.0 is set but then level is 0, so `x < 0` gives the same code.
    return _mm256_or_si256(level, _mm256_and_si256(negative, signCode));
  }
};

// qsgd's 4-bit codes (s = 7) of 64 values to 32 bytes at out, for a norm whose ratio needs no
// pre-scaling. The level is taken with its sign: trunc(fl(x inv) + copysign(u, x)) is sign(x) x
// floor(fl(|x| inv) + u), the same fp32 sum negated for x < 0 (rounding to nearest is symmetric) and
// truncation its floor on the magnitude (x = -0 gives -u, level 0). Clamped to [-7, 7] on the packed bytes,
// the two's complement nibble is turned into the code (sign bit 8 for a negative nonzero level) by a byte
// table: 5 operations per 8 values and 14 per 64 where QsgdLanes takes 10 per 8 (docs/notes.md,
// twenty-fifth part). The uniforms are widened from their kBits-bit fields at `fields` (rounding_fields.h).
template <int kBits>
inline void storeQsgd4Codes64(const float* x, const uint8_t* fields, __m256 to, uint8_t* out) {
  const __m256 signMask = _mm256_set1_ps(-0.0f);
  const __m256i top = _mm256_set1_epi8(7), bottom = _mm256_set1_epi8(-7), low4 = _mm256_set1_epi8(0x0f);
  // Nibble n of a level in [-7, 7] -> its code: n for 0..7, 8 | (16 - n) for 9..15 (-7..-1); 8 never occurs.
  const __m256i codeOf = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, 15, 14, 13, 12, 11, 10, 9,
                                          0, 1, 2, 3, 4, 5, 6, 7, 0, 15, 14, 13, 12, 11, 10, 9);
  __m256i level[8];
  for (size_t k = 0; k < 8; ++k) {
    const __m256 v = _mm256_loadu_ps(x + 8 * k);
    const __m256 u = uniformsOfFields8<kBits>(fields + 8 * k * (kBits / 8));
    const __m256 signedU = _mm256_xor_ps(u, _mm256_and_ps(v, signMask));
    level[k] = _mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(v, to), signedU));
  }
  const auto codes = [&](const __m256i* l) {
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(l[0], l[1]), _mm256_packs_epi32(l[2], l[3]));
    return _mm256_shuffle_epi8(codeOf, _mm256_and_si256(_mm256_min_epi8(_mm256_max_epi8(b, bottom), top), low4));
  };
  storeNibbleBytes64(codes(level), codes(level + 4), out);
}

// 8 codes (each at most 0xff) to 8 bytes at out.
inline void storeBytes8(__m256i code, uint8_t* out) {
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(w, w));
}

// ternCode on 8 lanes for a maximum whose ratio needs no pre-scaling: 1 for a kept positive, 2 for a kept
// negative (the sign bit, as std::signbit), 0 otherwise; kept where u < fl(|x| inv).
struct TernLanes {
  __m256 inv, absMask;
  __m256i one;
  explicit TernLanes(float scale)
      : inv(_mm256_set1_ps(scale)), absMask(_mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))), one(_mm256_set1_epi32(1)) {}
  __m256i codes(const float* x, __m256 u) const {
    const __m256 v = _mm256_loadu_ps(x);
    const __m256 keep = _mm256_cmp_ps(u, _mm256_mul_ps(_mm256_and_ps(v, absMask), inv), _CMP_LT_OQ);
    return _mm256_and_si256(_mm256_castps_si256(keep), _mm256_add_epi32(one, _mm256_srli_epi32(_mm256_castps_si256(v), 31)));
  }
};

}  // namespace
#endif

float encodeQsgdBlockOfNorm(const float* x, size_t n, int bits, float norm, const float* uniforms, uint8_t* codes) {
  const int s = scalar::qsgdLevels(bits);
  const scalar::RatioScaling toLevel = scalar::ratioScaling(static_cast<float>(s), norm);
  size_t i0 = 0;
#ifdef GRADCOMP_HAVE_AVX2
  // The scalar loop below on 8 lanes. Norms outside 2^-100 .. 2^100 (pre != 1) take the scalar loop.
  if (toLevel.pre == 1.0f) {
    const QsgdLanes lanes(toLevel.inv, bits);
    for (; i0 + 8 <= n; i0 += 8) storeBytes8(lanes.codes(x + i0, _mm256_loadu_ps(uniforms + i0)), codes + i0);
  }
#endif
  for (size_t i = i0; i < n; ++i) codes[i] = static_cast<uint8_t>(scalar::qsgdCode(x[i], toLevel, bits, uniforms[i]));
  return norm;
}

void decodeQsgdBlock(const uint8_t* codes, size_t n, int bits, float norm, float* out, bool accumulate) {
  const int s = (1 << (bits - 1)) - 1;
  const float unit = norm / static_cast<float>(s);
  const uint32_t levelMask = (1u << (bits - 1)) - 1u;
  for (size_t i = 0; i < n; ++i) {
    const float mag = static_cast<float>(codes[i] & levelMask) * unit;
    const float v = (codes[i] >> (bits - 1)) ? -mag : mag;
    out[i] = accumulate ? out[i] + v : v;
  }
}

float encodeTernBlock(const float* x, size_t n, const float* uniforms, uint8_t* codes, bool* nonFinite) {
  const float maxAbs = blockAmax(x, n);
  if (nonFinite && !scalar::isFiniteBits(scalar::floatBits(maxAbs))) {
    *nonFinite = true;
    return 0.0f;
  }
  const scalar::RatioScaling inv = scalar::ratioScaling(1.0f, maxAbs);
  size_t i0 = 0;
#ifdef GRADCOMP_HAVE_AVX2
  // Block maxima outside 2^-100 .. 2^100 (pre != 1) take the scalar loop.
  if (inv.pre == 1.0f) {
    const TernLanes lanes(inv.inv);
    for (; i0 + 8 <= n; i0 += 8) storeBytes8(lanes.codes(x + i0, _mm256_loadu_ps(uniforms + i0)), codes + i0);
  }
#endif
  for (size_t i = i0; i < n; ++i) codes[i] = static_cast<uint8_t>(scalar::ternCode(x[i], inv, uniforms[i]));
  return maxAbs;
}

void decodeTernBlock(const uint8_t* codes, size_t n, float maxAbs, float* out, bool accumulate) {
  size_t i0 = 0;
#ifdef GRADCOMP_HAVE_AVX2
  const __m256 vPos = _mm256_set1_ps(maxAbs), vNeg = _mm256_set1_ps(-maxAbs);
  const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
  for (; i0 + 8 <= n; i0 += 8) {
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i0)));
    __m256 v = _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(c, one)), vPos);
    v = _mm256_or_ps(v, _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(c, two)), vNeg));
    if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(out + i0), v);
    _mm256_storeu_ps(out + i0, v);
  }
#endif
  for (size_t i = i0; i < n; ++i) {
    const float v = codes[i] == 1 ? maxAbs : (codes[i] == 2 ? -maxAbs : 0.0f);
    out[i] = accumulate ? out[i] + v : v;
  }
}

namespace {

// The uniforms of elements begin .. begin + len - 1 as floats, for the block rules that take them so (the
// tiles' paths with neither vector route: other code widths and block sizes). A per-thread buffer,
// valid until the next call.
const float* widenedUniforms(const RoundingFields& fields, size_t begin, size_t len) {
  thread_local std::vector<float> u;
  if (u.size() < len) u.resize(len);
  for (size_t i = 0; i < len; ++i) u[i] = fields.uniform(begin + i);
  return u.data();
}

// n codes through the byte-per-code rule `encode(codes)`, then packed from bit 0 of `packed`.
template <typename Encode>
void packedThroughScratch(size_t n, int bits, uint8_t* packed, Encode&& encode) {
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < n) scratch.resize(n);
  uint8_t* codes = scratch.data();
  encode(codes);
  packBits(codes, n, bits, packed);
}

}  // namespace

#ifdef GRADCOMP_HAVE_AVX2
namespace {

// avx512::qsgdCodesPacked on 8 lanes (bits 4 or 8): the codes packed in registers, 64 at a time for 4 bits
// (storeQsgd4Codes64), then 16; 8 at a time for 8 bits. Returns the values encoded (a multiple of 16 for 4
// bits, of 8 for 8); the caller encodes the rest. Without it the AVX2 path wrote a byte per code to
// scratch and packed them in a second pass (docs/notes.md, twenty-fourth part).
template <int kBits>
size_t qsgdCodesPackedOfFields(const float* x, size_t n, int bits, float inv, const RoundingFields& u,
                               uint8_t* packed) {
  const QsgdLanes lanes(inv, bits);
  const auto uniforms = [&](size_t i) { return uniformsOfFields8<kBits>(u.bytesAt(i)); };
  size_t i = 0;
  if (bits == 8) {
    for (; i + 8 <= n; i += 8) storeBytes8(lanes.codes(x + i, uniforms(i)), packed + i);
    return i;
  }
  for (; i + 64 <= n; i += 64) storeQsgd4Codes64<kBits>(x + i, u.bytesAt(i), lanes.to, packed + i / 2);
  for (; i + 16 <= n; i += 16)
    storeNibbles16(lanes.codes(x + i, uniforms(i)), lanes.codes(x + i + 8, uniforms(i + 8)), packed + i / 2);
  return i;
}

size_t qsgdCodesPackedAvx2(const float* x, size_t n, int bits, float inv, const RoundingFields& u, uint8_t* packed) {
  return u.bits == 8 ? qsgdCodesPackedOfFields<8>(x, n, bits, inv, u, packed)
                     : qsgdCodesPackedOfFields<16>(x, n, bits, inv, u, packed);
}

// avx512::ternCodesPacked on 8 lanes: code 1 for a kept x (u < fl(|x| inv)) with a clear sign bit, 2 for
// one with it set, 0 otherwise, 64 codes packed at a time (storeTwoBitCodes64), then 16. Returns the
// values encoded (a multiple of 16); the caller encodes the rest. (Two movemasks per vector with the bits
// interleaved by table lookups, as AVX-512's pdep does, put about 1.4 scalar instructions per value on
// the integer ports: slower than the byte codes and the packing pass they replaced, 9.6 -> 10.9 ms per
// 16M values.)
template <int kBits>
size_t ternCodesPackedOfFields(const float* x, size_t n, float inv, const RoundingFields& u, uint8_t* packed) {
  const TernLanes lanes(inv);
  const auto codes = [&](size_t i) { return lanes.codes(x + i, uniformsOfFields8<kBits>(u.bytesAt(i))); };
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m256i c[8];
    for (size_t k = 0; k < 8; ++k) c[k] = codes(i + 8 * k);
    storeTwoBitCodes64(c, packed + i / 4);
  }
  // 16 at a time for a block's rest (and blocks of 16, 32, 48): the same packing, 6 vectors of zeros.
  for (; i + 16 <= n; i += 16) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i c[8] = {codes(i), codes(i + 8), zero, zero, zero, zero, zero, zero};
    alignas(16) uint8_t bytes[16];
    storeTwoBitCodes64(c, bytes);
    std::memcpy(packed + i / 4, bytes, 4);
  }
  return i;
}

size_t ternCodesPackedAvx2(const float* x, size_t n, float inv, const RoundingFields& u, uint8_t* packed) {
  return u.bits == 8 ? ternCodesPackedOfFields<8>(x, n, inv, u, packed)
                     : ternCodesPackedOfFields<16>(x, n, inv, u, packed);
}

}  // namespace
#endif

void encodeQsgdTilePacked(const float* x, size_t n, size_t blockSize, int bits, const float* norms,
                          const RoundingFields& uniforms, uint8_t* packed) {
  // Whole blocks of a multiple of 16 start on a byte (16 codes fill whole bytes); their codes go from
  // registers, a short last block's tail (and a block whose norm needs the normalized ratio) by the scalar
  // rule.
  [[maybe_unused]] const auto inRegisters = [&](auto&& codesPacked) {
    const int s = scalar::qsgdLevels(bits);
    for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) {
      const size_t len = std::min(blockSize, n - b0);
      const scalar::RatioScaling toLevel = scalar::ratioScaling(static_cast<float>(s), norms[block]);
      uint8_t* out = packed + b0 * static_cast<size_t>(bits) / 8;
      const size_t done = toLevel.pre == 1.0f ? codesPacked(x + b0, len, bits, toLevel.inv, uniforms.from(b0), out) : 0;
      if (done < len)
        packedThroughScratch(len - done, bits, out + done * static_cast<size_t>(bits) / 8, [&](uint8_t* codes) {
          for (size_t i = done; i < len; ++i)
            codes[i - done] =
                static_cast<uint8_t>(scalar::qsgdCode(x[b0 + i], toLevel, bits, uniforms.uniform(b0 + i)));
        });
    }
  };
  [[maybe_unused]] const bool packable = blockSize % 16 == 0 && (bits == 4 || bits == 8);
#if GRADCOMP_CPU_AVX512_KERNELS
  if (packable && activeCpuPath() == CpuPath::Avx512) return inRegisters(avx512::qsgdCodesPacked);
#endif
#ifdef GRADCOMP_HAVE_AVX2
  if (packable && activeCpuPath() >= CpuPath::Avx2) return inRegisters(qsgdCodesPackedAvx2);
#endif
  // Other widths and block sizes: the byte-per-code rule (8 lanes at a time on AVX2) and the packing.
  packedThroughScratch(n, bits, packed, [&](uint8_t* codes) {
    for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) {
      const size_t len = std::min(blockSize, n - b0);
      encodeQsgdBlockOfNorm(x + b0, len, bits, norms[block], widenedUniforms(uniforms, b0, len), codes + b0);
    }
  });
}

size_t encodeTernTilePacked(const float* x, size_t n, size_t blockSize, const RoundingFields& uniforms, float* maxima,
                            uint8_t* packed) {
  // Blocks of a multiple of 16 start on a byte (4 codes a byte); their codes go from registers, a short
  // last block's tail (and a block whose maximum needs the normalized ratio) by the scalar rule.
  [[maybe_unused]] const auto inRegisters = [&](auto&& maxAbsOf, auto&& codesPacked) -> size_t {
    for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) {
      const size_t len = std::min(blockSize, n - b0);
      const float maxAbs = maxAbsOf(x + b0, len);
      if (!scalar::isFiniteBits(scalar::floatBits(maxAbs))) return b0 + scalar::firstNonFiniteIndex(x + b0, len);
      maxima[block] = maxAbs;
      const scalar::RatioScaling inv = scalar::ratioScaling(1.0f, maxAbs);
      uint8_t* out = packed + b0 / 4;
      const size_t done = inv.pre == 1.0f ? codesPacked(x + b0, len, inv.inv, uniforms.from(b0), out) : 0;
      if (done < len)
        packedThroughScratch(len - done, 2, out + done / 4, [&](uint8_t* codes) {
          for (size_t i = done; i < len; ++i)
            codes[i - done] = static_cast<uint8_t>(scalar::ternCode(x[b0 + i], inv, uniforms.uniform(b0 + i)));
        });
    }
    return n;
  };
#if GRADCOMP_CPU_AVX512_KERNELS
  if (activeCpuPath() == CpuPath::Avx512 && blockSize % 16 == 0)
    // The maximum on 16 lanes (blockAmax's 8 took a sixth of the encode): the same bits, order-free.
    return inRegisters([](const float* p, size_t len) { return scalar::bitsToFloat(avx512::maxAbsBits(p, len)); },
                       avx512::ternCodesPacked);
#endif
#ifdef GRADCOMP_HAVE_AVX2
  if (activeCpuPath() >= CpuPath::Avx2 && blockSize % 16 == 0)
    // The tile is in cache (prefetched as the uniforms were drawn): the maximum on one chain without
    // blockAmax's prefetches and the test for them per vector (2.7 cycles a vector there; terngrad's block
    // maxima 17 % of its encode in cache: docs/notes.md, twenty-fifth part).
    return inRegisters([](const float* p, size_t len) {
      return len % 8 ? blockAmax(p, len) : scalar::bitsToFloat(largestLane(laneMaxAbsBits(p, len)));
    }, ternCodesPackedAvx2);
#endif
  size_t bad = n;
  packedThroughScratch(n, 2, packed, [&](uint8_t* codes) {
    for (size_t b0 = 0, block = 0; b0 < n && bad == n; b0 += blockSize, ++block) {
      const size_t len = std::min(blockSize, n - b0);
      bool nonFinite = false;
      maxima[block] = encodeTernBlock(x + b0, len, widenedUniforms(uniforms, b0, len), codes + b0, &nonFinite);
      if (nonFinite) bad = b0 + scalar::firstNonFiniteIndex(x + b0, len);
    }
  });
  return bad;
}

#ifdef GRADCOMP_HAVE_AVX2
// decodeTernBlock from the packed 2-bit codes of one block (starting on a byte): 16 codes from one 32-bit
// word, lane j of each half taking bits 2j and 2j + 1 by a variable shift; the values as decodeTernBlock
// forms them (the add even for a zero value: -0 + +0 is +0).
static void decodeTernCodesPackedAvx2(const uint8_t* packed, size_t n, float maxAbs, float* out, bool accumulate) {
  const __m256 vPos = _mm256_set1_ps(maxAbs), vNeg = _mm256_set1_ps(-maxAbs);
  const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2), three = _mm256_set1_epi32(3);
  const __m256i lowShifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i highShifts = _mm256_add_epi32(lowShifts, _mm256_set1_epi32(16));
  const auto values = [&](__m256i word, __m256i shifts) {
    const __m256i c = _mm256_and_si256(_mm256_srlv_epi32(word, shifts), three);
    return _mm256_or_ps(_mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(c, one)), vPos),
                        _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(c, two)), vNeg));
  };
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    uint32_t bits;
    std::memcpy(&bits, packed + i / 4, sizeof bits);
    const __m256i word = _mm256_set1_epi32(static_cast<int>(bits));
    __m256 lo = values(word, lowShifts), hi = values(word, highShifts);
    if (accumulate) {
      // The sum streams from memory: its line 4 KiB ahead (as the AVX-512 decoder asks).
      prefetchFloats(out, i + 1024, i + 1040, PrefetchInto::L1);
      lo = _mm256_add_ps(_mm256_loadu_ps(out + i), lo);
      hi = _mm256_add_ps(_mm256_loadu_ps(out + i + 8), hi);
    }
    _mm256_storeu_ps(out + i, lo);
    _mm256_storeu_ps(out + i + 8, hi);
  }
  for (; i < n; ++i) {  // a short last block's codes, from their bytes
    const uint32_t code = (packed[i / 4] >> (2 * (i % 4))) & 3u;
    const float v = code == 1 ? maxAbs : (code == 2 ? -maxAbs : 0.0f);
    out[i] = accumulate ? out[i] + v : v;
  }
}
#endif

void decodeTernTilePacked(const uint8_t* packed, size_t n, size_t blockSize, const float* maxima, float* out,
                          bool accumulate) {
#if GRADCOMP_CPU_AVX512_KERNELS
  // Unpacking into a byte per code first was a third of terngrad's decode-accumulate (1.3-1.7x memcpy on
  // the Xeon of 2026-12-04, against qsgd's 0.9-1.1).
  if (activeCpuPath() == CpuPath::Avx512 && blockSize % 16 == 0) {
    for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block)
      avx512::decodeTernCodesPacked(packed + b0 / 4, std::min(blockSize, n - b0), maxima[block], out + b0, accumulate);
    return;
  }
#endif
#ifdef GRADCOMP_HAVE_AVX2
  // As the AVX-512 path: no byte per code written and read back. Decode-accumulate 9.6-15.4 -> 3.5-4.1 ms
  // per 16M values on the Xeon of 2026-12-04 (x86-64-v3 build, avx2 path).
  if (activeCpuPath() >= CpuPath::Avx2 && blockSize % 16 == 0) {
    for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block)
      decodeTernCodesPackedAvx2(packed + b0 / 4, std::min(blockSize, n - b0), maxima[block], out + b0, accumulate);
    return;
  }
#endif
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < n) scratch.resize(n);
  unpackBits(packed, n, 2, scratch.data());
  for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block)
    decodeTernBlock(scratch.data() + b0, std::min(blockSize, n - b0), maxima[block], out + b0, accumulate);
}

}  // namespace gradcomp::cpu
