// The packed block encoders (MX, NVFP4, int4) and decoders on every vector path this CPU runs (kernels/cpu/cpu_path.h)
// against the scalar reference, bit for bit: packed codes, scale codes / scales, saturation counts, the
// first NaN/Inf and the decoded values (overwrite and accumulate), at every length 0..100 (every tail of the 16-lane loops and of a block) and a long
// one, for the standard block sizes and one that is not a multiple of 16, with values that saturate,
// land in every format's subnormals, and are non-finite.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cpu/block_scale_kernels.h"
#include "kernels/cpu/cast_kernels.h"
#include "kernels/cpu/cpu_path.h"
#include "kernels/cpu/level_kernels.h"
#include "kernels/cpu/microscaling_kernels.h"
#include "kernels/cpu/rounding_fields.h"
#include "kernels/scalar/level_codes.h"
#include "kernels/scalar/scale_limits.h"
#include "tests/kernels/cpu_path_params.h"

namespace gradcomp::cpu {
namespace {

using scalar::ElementFormat;

std::vector<float> inputs(size_t n, uint64_t seed, bool nonFinite) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  // Per block, a wide spread: the block maximum, values 2^-20 of it (subnormal codes), exact zeros, and
  // -FLT_MAX (the largest amax, where blockScaleFor's raise by ulps would apply if it ever did).
  const float specials[] = {3.3e38f, -1e-40f, -0.0f, 0.0f, 448.0f, 6.0f, 1e-30f, -std::numeric_limits<float>::max()};
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = rng() % 16;
    x[i] = r == 0 ? specials[rng() % 8] : r == 1 ? normal(rng) * 0x1p-20f : r == 2 ? normal(rng) * 1e6f : normal(rng);
  }
  // Two whole 16-element blocks of +-0 and of tiny values: NVFP4's zero block scale inside a group.
  for (size_t i = 160; i < 192 && i < n; ++i) x[i] = i < 176 ? (i % 2 ? -0.0f : 0.0f) : normal(rng) * 1e-30f;
  if (nonFinite && n > 0) x[n - 1 - n / 3] = rng() % 2 ? std::numeric_limits<float>::quiet_NaN() : -INFINITY;
  return x;
}

struct Packed {
  std::vector<uint8_t> codes, scaleCodes;
  std::vector<float> scales;
  std::vector<uint32_t> decoded, accumulated;  // bits of the packed decoders' output
  uint64_t saturated = 0, firstBad = ~uint64_t{0};
  bool operator==(const Packed&) const = default;
};

// kind: 0..4 the MX element formats, 5 nvfp4 (tensor scale t), 6 int4 nearest, 7 int4 stochastic (16-bit
// fields from element 0), 8 int4 stochastic (8-bit fields from element 5, inside a Philox call).
Packed run(CpuPath path, int kind, const std::vector<float>& x, size_t blockSize, float t,
           const Packed* scalarCodes = nullptr) {
  setCpuPath(path);
  const size_t n = x.size(), blocks = (n + blockSize - 1) / blockSize;
  Packed p;
  p.codes.assign(n + 16, 0xee);  // bytes past the codes must stay as they were
  p.scaleCodes.assign(blocks, 0);
  p.scales.assign(blocks, 0.0f);
  if (kind <= 5) {
    const auto fmt = static_cast<ElementFormat>(kind);
    p.saturated = kind < 5 ? encodeMxBlocksPacked(x.data(), n, blockSize, fmt, p.codes.data(), p.scaleCodes.data(),
                                                  &p.firstBad)
                           : encodeNvfp4BlocksPacked(x.data(), n, blockSize, t, p.codes.data(),
                                                     p.scaleCodes.data(), &p.firstBad);
    if (kind == 5) {
      // Given the block maxima of the tensor's first pass (nvfp4BlockMaxBits, which the codec keeps from its
      // amax pass where the path reads them), the same bytes, the same first NaN/Inf and the same amax.
      std::vector<uint32_t> maxBits(blocks + 1, 0xdeadbeef);  // the word past the last block must stay
      const uint32_t largest = nvfp4BlockMaxBits(x.data(), n, blockSize, maxBits.data());
      for (size_t b = 0; b < blocks; ++b) {
        uint32_t m = 0;
        for (size_t i = b * blockSize; i < std::min(n, (b + 1) * blockSize); ++i) m = std::max(m, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
        EXPECT_EQ(maxBits[b], m) << "block " << b;
      }
      EXPECT_EQ(maxBits[blocks], 0xdeadbeefu);
      EXPECT_EQ(largest, blocks ? *std::max_element(maxBits.begin(), maxBits.begin() + static_cast<ptrdiff_t>(blocks)) : 0u);
      std::vector<uint8_t> codes(n + 16, 0xee), scaleCodes(blocks, 0);
      uint64_t firstBad = ~uint64_t{0};
      const uint64_t saturated =
          encodeNvfp4BlocksPacked(x.data(), n, blockSize, t, codes.data(), scaleCodes.data(), &firstBad, maxBits.data());
      EXPECT_EQ(firstBad, p.firstBad);
      if (firstBad == ~uint64_t{0}) {
        EXPECT_EQ(codes, p.codes);
        EXPECT_EQ(scaleCodes, p.scaleCodes);
        EXPECT_EQ(saturated, p.saturated);
      }
      // A tile that starts 3 blocks in (the codec's tiles start on a block, not on a group), given the
      // maxima from that block on: the bytes and first NaN/Inf of the same tile encoded without them.
      const size_t skip = 3 * blockSize;
      if (n > skip) {
        std::vector<uint8_t> tileCodes(n + 16, 0xee), tileScales(blocks, 0), keptCodes(n + 16, 0xee), keptScales(blocks, 0);
        uint64_t tileBad = ~uint64_t{0}, keptBad = ~uint64_t{0};
        const uint64_t tileSaturated = encodeNvfp4BlocksPacked(x.data() + skip, n - skip, blockSize, t, tileCodes.data(),
                                                               tileScales.data(), &tileBad);
        const uint64_t keptSaturated = encodeNvfp4BlocksPacked(x.data() + skip, n - skip, blockSize, t, keptCodes.data(),
                                                               keptScales.data(), &keptBad, maxBits.data() + 3);
        EXPECT_EQ(keptBad, tileBad);
        if (tileBad == ~uint64_t{0}) {
          EXPECT_EQ(keptCodes, tileCodes);
          EXPECT_EQ(keptScales, tileScales);
          EXPECT_EQ(keptSaturated, tileSaturated);
        }
      }
    }
    if (p.firstBad != ~uint64_t{0}) return p;
    // Decode what the scalar path wrote (the same bytes, checked above), so a decoder is compared on
    // identical input; the outputs start one float into their buffers, so the stores are unaligned, and the
    // float before them shows a write out of range.
    const Packed* reference = scalarCodes;
    std::vector<float> y(n + 1, -1.0f), acc(n + 1, 0.25f);
    const uint8_t* codes = reference ? reference->codes.data() : p.codes.data();
    const uint8_t* scales = reference ? reference->scaleCodes.data() : p.scaleCodes.data();
    for (const bool accumulate : {false, true}) {
      float* out = (accumulate ? acc.data() : y.data()) + 1;
      if (kind < 5) decodeMxBlocksPacked(codes, n, blockSize, fmt, scales, out, accumulate);
      else decodeNvfp4BlocksPacked(codes, n, blockSize, scales, t, out, accumulate);
    }
    for (size_t i = 0; i <= n; ++i) {
      p.decoded.push_back(std::bit_cast<uint32_t>(y[i]));
      p.accumulated.push_back(std::bit_cast<uint32_t>(acc[i]));
    }
  } else {
    std::vector<uint32_t> words;
    const RoundingFields u = kind == 6 ? RoundingFields{}
                                       : fillRoundingFields(scalar::RngStream::make(9, 0, 1, 2).withRoundingBits(kind == 7 ? 16 : 8),
                                                            kind == 7 ? 0 : 5, n, words);
    encodeInt4Blocks(x.data(), n, blockSize, u, p.scales.data(), p.codes.data(), &p.firstBad);
    if (p.firstBad != ~uint64_t{0}) return p;
    const Packed& source = scalarCodes ? *scalarCodes : p;
    std::vector<float> y(n + 1, -1.0f), acc(n + 1, 0.25f);
    decodeInt4Blocks(source.codes.data(), n, blockSize, source.scales.data(), y.data() + 1, false);
    decodeInt4Blocks(source.codes.data(), n, blockSize, source.scales.data(), acc.data() + 1, true);
    for (size_t i = 0; i <= n; ++i) {
      p.decoded.push_back(std::bit_cast<uint32_t>(y[i]));
      p.accumulated.push_back(std::bit_cast<uint32_t>(acc[i]));
    }
  }
  return p;
}

class BlockKernelPaths : public CpuPathTest {};

TEST_P(BlockKernelPaths, EveryLengthGivesTheScalarBytes) {
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 100; ++n) lengths.push_back(n);
  // Whole groups of 16 NVFP4 blocks (the AVX-512 group encoder), one exactly, then with a remainder.
  for (const size_t n : {256, 528, 4099}) lengths.push_back(n);
  // The AVX2 NVFP4 encoder's chunks of 8 groups of 128 values: a whole chunk and a partial one (its NaN at
  // 1066, in the second chunk's first group), and 8 + 8 + 7 groups and a tail.
  for (const size_t n : {1600, 3001}) lengths.push_back(n);
  // NVFP4's tensor scale: a usual one, one so small that most block scales saturate (every code counted
  // by the group encoder's saturation path) and one so large that most are zero (its zero-factor path).
  const float tensorScales[] = {0.0125f, 0x1p-126f, 0x1p100f};
  size_t compared = 0, saturatedCases = 0;
  for (int kind = 0; kind < 9; ++kind) {
    const size_t standard = kind < 5 ? 32 : kind == 5 ? 16 : 64;
    for (const float t : kind == 5 ? std::span<const float>(tensorScales) : std::span<const float>(tensorScales, 1)) {
      for (const size_t blockSize : {standard, size_t{48}, size_t{24}})
        for (const size_t n : lengths)
          for (const bool nonFinite : {false, true}) {
            if (nonFinite && n == 0) continue;
            SCOPED_TRACE(::testing::Message() << "kind " << kind << " t " << t << " block " << blockSize << " n " << n
                                              << " nonFinite " << nonFinite);
            const auto x = inputs(n, n * 31 + kind, nonFinite);
            const Packed want = run(CpuPath::Scalar, kind, x, blockSize, t);
            const Packed got = run(GetParam(), kind, x, blockSize, t, &want);
            ASSERT_EQ(got.firstBad, want.firstBad);
            if (nonFinite) {
              ASSERT_NE(got.firstBad, ~uint64_t{0});  // found; the codes are then unspecified
            } else {
              ASSERT_EQ(got.codes, want.codes);
              ASSERT_EQ(got.scaleCodes, want.scaleCodes);
              ASSERT_EQ(got.scales, want.scales);
              ASSERT_EQ(got.saturated, want.saturated);
              ASSERT_EQ(got.decoded, want.decoded);
              ASSERT_EQ(got.accumulated, want.accumulated);
              saturatedCases += want.saturated > 0;
            }
            ++compared;
          }
    }
  }
  EXPECT_GT(saturatedCases, 100u);  // the inputs do reach the saturating edge
  std::printf("block kernels (mx, nvfp4, int4: packed encode and decode): %zu cases on the %s path equal the scalar reference\n",
              compared, cpuPathName(GetParam()));
}

// x encoded as NVFP4 (tensor scale t) on the scalar path and on `path`: the same codes, scale codes and
// saturation count expected. Returns the scalar path's result.
Packed nvfp4OnPathAsScalar(CpuPath path, const std::vector<float>& x, size_t blockSize, float t) {
  Packed want = run(CpuPath::Scalar, 5, x, blockSize, t);
  const Packed got = run(path, 5, x, blockSize, t, &want);
  EXPECT_EQ(got.codes, want.codes) << "t " << t << ", blocks of " << blockSize;
  EXPECT_EQ(got.scaleCodes, want.scaleCodes) << "t " << t << ", blocks of " << blockSize;
  EXPECT_EQ(got.saturated, want.saturated) << "t " << t << ", blocks of " << blockSize;
  return want;
}

// NVFP4 elements whose quotient x / f lies on or within two ulps of an E2M1 rounding edge (0.25, 0.75,
// ..., 5) or grid value, for block scales across E4M3's range: where a quotient computed without a
// correctly rounded division would pick the neighbouring code. Each block's largest magnitude is
// 6 t s exactly, so its scale code is s's and its factor f = fl(s t) is known in advance.
TEST_P(BlockKernelPaths, Nvfp4QuotientsAtTheRoundingEdgesGiveTheScalarCodes) {
  const float edges[] = {0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f};
  std::mt19937_64 rng(14);
  size_t compared = 0;
  // Factors from 2^-109 to past 2^125: the quotients near each edge for scales of every magnitude. 0x1p116
  // gives factors up to 0x1.cp124; nvfp4TensorScale(FLT_MAX), the largest t the codec produces (FLT_MAX /
  // 2688), factors past 2^125, which the group encoders divide by (their reciprocals are not used there).
  for (const float t :
       {0.0125f, 3.1e-7f, 0.7f, 123.456f, 0x1p-100f, 0x1p90f, 0x1p116f, scalar::nvfp4TensorScale(FLT_MAX)}) {
    const size_t n = 4096 + 16;  // 16 whole groups and one block
    std::vector<float> x(n);
    for (size_t b = 0; b < n / 16; ++b) {
      const uint8_t code = static_cast<uint8_t>(1 + rng() % 0x7e);  // a nonzero finite E4M3 scale
      const float s = scalar::fp8ToFloat(code, scalar::Fp8Format::E4M3), f = s * t;
      x[16 * b] = 6.0f * t * s;
      ASSERT_EQ(scalar::nvfp4BlockScaleCode(x[16 * b], t), code);
      for (size_t i = 1; i < 16; ++i) {
        const float base = edges[rng() % std::size(edges)] * f;
        const int ulps = static_cast<int>(rng() % 5) - 2;
        const float v = std::bit_cast<float>(std::bit_cast<uint32_t>(base) + static_cast<uint32_t>(ulps));
        x[16 * b + i] = rng() % 2 ? -v : v;
      }
    }
    nvfp4OnPathAsScalar(GetParam(), x, 16, t);
    compared += n;
  }
  std::printf("nvfp4 at E2M1's rounding edges: %zu elements on the %s path equal the scalar reference\n", compared,
              cpuPathName(GetParam()));
}

// Blocks of NVFP4 elements whose quotients x / f all lie near one start of a quarter binade (where an
// E2M1 code changes), each quotient moved from the start by quotientUlps(rng) ulps and its x by up to
// xUlps, kept only where the product with fl(1 / f) rounds differently from the quotient. Each block's
// largest magnitude is fl(fl(6.1 t) s), whose E4M3 scale is s (checked) and whose quotient, about 6.1, is
// near no start. Returns the elements (16 x 4096) and counts the differing ones.
template <typename QuotientUlps>
std::vector<float> nvfp4BlocksNearQuarterStarts(std::mt19937_64& rng, float t, QuotientUlps&& quotientUlps, int xUlps,
                                                size_t& differing) {
  std::vector<float> x;
  while (x.size() < 16 * 4096) {
    const uint8_t code = static_cast<uint8_t>(1 + rng() % 0x7e);
    const float s = scalar::fp8ToFloat(code, scalar::Fp8Format::E4M3), f = s * t;
    const float largest = 6.1f * t * s;
    // Where f is a power of two (s = 1.25 x 2^k with t = 1/80) the product is the quotient: another scale.
    if (std::bit_cast<uint32_t>(f) << 9 == 0 || scalar::nvfp4BlockScaleCode(largest, t) != code) continue;
    // A quarter start from 2^-3 to 6 (all of E2M1's edges and its saturation).
    const int exponent = static_cast<int>(rng() % 6) - 3;
    const float start = std::ldexp(1.0f + 0.25f * static_cast<float>(rng() % 4), exponent);
    if (start > 6.0f) continue;
    const float reciprocal = 1.0f / f;
    std::vector<float> block{largest};
    for (int tries = 0; block.size() < 16 && tries < 10000; ++tries) {
      const float q = std::bit_cast<float>(std::bit_cast<uint32_t>(start) + static_cast<uint32_t>(quotientUlps(rng)));
      const float v = std::bit_cast<float>(std::bit_cast<uint32_t>(q * f) +
                                           static_cast<uint32_t>(static_cast<int>(rng() % (2 * xUlps + 1)) - xUlps));
      if (std::fabs(v) > 6.0f * f || v * reciprocal == v / f) continue;
      block.push_back(rng() % 2 ? -v : v);
    }
    if (block.size() < 16) continue;
    differing += 15;
    x.insert(x.end(), block.begin(), block.end());
  }
  return x;
}

// NVFP4 elements whose quotient x / f lies within 3 ulps of the start of a quarter binade and whose
// product with fl(1 / f) rounds differently from the quotient: the cases where a product standing in for
// the quotient (the group encoders, away from a start) would pick another code. All of a block's near one
// start, so that a vector's lanes are all near the same start (a lane near another start would send the
// whole vector to the divider and hide a start the kernel's test missed).
TEST_P(BlockKernelPaths, Nvfp4ProductsThatDifferFromTheQuotientGiveTheScalarCodes) {
  std::mt19937_64 rng(15);
  const float t = 0.0125f;
  size_t differing = 0;
  const auto withinThree = [](std::mt19937_64& r) { return static_cast<int>(r() % 7) - 3; };
  const std::vector<float> x = nvfp4BlocksNearQuarterStarts(rng, t, withinThree, 2, differing);
  nvfp4OnPathAsScalar(GetParam(), x, 16, t);
  std::printf("nvfp4 products that differ from the quotient near a quarter's start: %zu elements on the %s path\n",
              differing, cpuPathName(GetParam()));
}

// The same just outside the group encoders' near-start window (quotients 4-7 ulps below a start or 5-8
// above it, x moved by up to 1 ulp): there the product stands in for the quotient, although the two
// differ, and its code (the AVX2 path's by key on bytes) must be the quotient's.
TEST_P(BlockKernelPaths, Nvfp4ProductsJustOutsideTheNearStartWindowGiveTheScalarCodes) {
  std::mt19937_64 rng(19);
  const float t = 0.0125f;
  size_t differing = 0;
  const auto justOutside = [](std::mt19937_64& r) {
    return r() % 2 ? 5 + static_cast<int>(r() % 4) : -4 - static_cast<int>(r() % 4);
  };
  const std::vector<float> x = nvfp4BlocksNearQuarterStarts(rng, t, justOutside, 1, differing);
  nvfp4OnPathAsScalar(GetParam(), x, 16, t);
  std::printf("nvfp4 products that differ from the quotient just outside the near-start window: %zu elements on "
              "the %s path\n",
              differing, cpuPathName(GetParam()));
}

// NVFP4 block maxima whose quotient amax / fl(6 t) lies within 3 ulps of a value of four fraction bits
// (where an E4M3 scale code can change) and whose product with fl(1 / fl(6 t)) has another E4M3 code than
// the quotient: where a product standing in for the quotient (the AVX-512 group encoder's scales) would
// pick another scale. One such block per group of 16, the others' quotients far inside their steps, so
// that a near block the kernel's test missed is not divided for its neighbours' sake.
TEST_P(BlockKernelPaths, Nvfp4ScalesNearAnE4M3StepGiveTheScalarCodes) {
  std::mt19937_64 rng(16);
  size_t differing = 0, compared = 0;
  // 16-value blocks through the group encoders, 32 and 48 through the per-block loops (the same scale
  // rule); the largest t the codec produces, whose factors reach 2^125.
  for (const size_t blockSize : {size_t{16}, size_t{32}, size_t{48}}) {
    for (const float t : {0.0125f, 3.1e-7f, 0.7f, 0x1p-100f, 0x1p90f, scalar::nvfp4TensorScale(FLT_MAX)}) {
      const float sixT = scalar::mulRn(6.0f, t), reciprocal = 1.0f / sixT;
      std::vector<float> x;
      while (x.size() < blockSize * 2048) {
        // A value of four fraction bits across E4M3's range and its saturation (2^-10 .. 464), moved by up
        // to 3 ulps; its amax by up to 2.
        const float step = std::ldexp(1.0f + 0.0625f * static_cast<float>(rng() % 16), static_cast<int>(rng() % 19) - 10);
        if (step > 464.0f) continue;
        const float q = std::bit_cast<float>(std::bit_cast<uint32_t>(step) + static_cast<uint32_t>(rng() % 7) - 3u);
        const float amax = std::bit_cast<float>(std::bit_cast<uint32_t>(q * sixT) + static_cast<uint32_t>(rng() % 5) - 2u);
        if (!std::isfinite(amax)) continue;  // past FLT_MAX at the largest t
        if (scalar::floatToFp8(amax * reciprocal, scalar::Fp8Format::E4M3) == scalar::nvfp4BlockScaleCode(amax, t)) continue;
        ++differing;
        const size_t near = rng() % 16;
        for (size_t b = 0; b < 16; ++b) {
          // Far blocks: a quotient of mantissa 1 + 2^-5 (2^18 ulps from a step's start), 2^-6 .. 2^8.
          const float largest = b == near ? amax : std::ldexp(1.03125f, static_cast<int>(rng() % 15) - 6) * sixT;
          x.push_back(rng() % 2 ? -largest : largest);
          // x times a fraction: x times 999 would overflow at the largest t.
          for (size_t i = 1; i < blockSize; ++i) x.push_back(largest * (static_cast<float>(rng() % 1000) / 1000.0f));
        }
      }
      nvfp4OnPathAsScalar(GetParam(), x, blockSize, t);
      compared += x.size() / blockSize;
    }
  }
  std::printf("nvfp4 block scales whose product and quotient differ near an E4M3 step: %zu of %zu blocks on the %s path\n",
              differing, compared, cpuPathName(GetParam()));
}

// NVFP4 blocks with a subnormal E4M3 scale (codes 1-7, 2^-9 apart), whose rounding is coarse enough
// that a block's largest quotient x / f reaches E2M1's overflow midpoint 7 without a saturated scale: for
// code c, up to 6 (c + 1/2) / c (9 at code 1, 7.5 at 2, 7 at 3). The AVX2 group encoder counts saturation
// by division only in blocks with a subnormal or saturated scale, so these must be counted as the scalar
// reference does. Each block's largest magnitude is the largest with scale code c; its other values lie
// within 4 ulps of 7 f where that is below the largest, else anywhere below it.
TEST_P(BlockKernelPaths, Nvfp4SubnormalScalesNearTheOverflowMidpointAreCounted) {
  std::mt19937_64 rng(18);
  size_t counted = 0;
  for (const float t : {0.0125f, 3.1e-7f, 0x1p-100f}) {
    std::vector<float> x;
    for (size_t b = 0; x.size() < 16 * 2048; ++b) {
      // One code for 8 blocks in a row: a group encoder that screens 8 blocks at a time and divides all 8
      // where one needs it would otherwise hide a missed code behind its neighbour's.
      const uint8_t code = static_cast<uint8_t>(1 + b / 8 % 7);
      const float f = scalar::nvfp4BlockFactor(code, t);
      // The largest amax with this scale code: from (c + 1/2) 2^-9 x fl(6 t) down to the first that rounds to c.
      float largest = scalar::mulRn((static_cast<float>(code) + 0.5f) * 0x1p-9f, scalar::mulRn(6.0f, t));
      for (int step = 0; scalar::nvfp4BlockScaleCode(largest, t) != code; ++step) {
        ASSERT_LT(step, 64) << "no largest magnitude for scale code " << int{code} << " at t " << t;
        largest = std::bit_cast<float>(std::bit_cast<uint32_t>(largest) - 1u);
      }
      const float midpoint = scalar::mulRn(7.0f, f);
      x.push_back(rng() % 2 ? -largest : largest);
      for (int i = 1; i < 16; ++i) {
        float v = std::bit_cast<float>(std::bit_cast<uint32_t>(midpoint) + static_cast<uint32_t>(rng() % 9) - 4u);
        if (v > largest) v = largest * static_cast<float>(rng() % 1000) / 1000.0f;
        x.push_back(rng() % 2 ? -v : v);
      }
    }
    const Packed want = nvfp4OnPathAsScalar(GetParam(), x, 16, t);
    ASSERT_GT(want.saturated, x.size() / 16);  // codes 1 and 2 saturate every block's largest at least
    counted += want.saturated;
  }
  std::printf("nvfp4 subnormal block scales near the overflow midpoint: %zu values counted on the %s path\n", counted,
              cpuPathName(GetParam()));
}

// A subnormal tensor scale, which the codec never produces (nvfp4TensorScale floors it at 2^-126) but the
// kernels accept: a factor f = fl(s t) can then round far down (1.375 x 2^-149 to 2^-149), so a block with
// a normal E4M3 scale reaches the overflow midpoint (amax / f = 8 here) and must be counted.
TEST_P(BlockKernelPaths, Nvfp4SubnormalTensorScaleCountsSaturationAsTheScalarPath) {
  const float t = 0x1p-143f;
  std::vector<float> x(16 * 64, 0.0f);
  for (size_t b = 0; b < x.size() / 16; ++b) x[16 * b] = b % 2 ? -0x1p-146f : 0x1p-146f;
  const Packed want = nvfp4OnPathAsScalar(GetParam(), x, 16, t);
  ASSERT_EQ(want.saturated, x.size() / 16);
}

// NVFP4 blocks whose largest quotient x / f lies within 4 ulps of E2M1's overflow midpoint (7): the
// saturation count, which the AVX-512 group encoder screens by the product with fl(1 / f) 4 ulps short of
// the midpoint, must be the scalar reference's. Only a saturated block scale (448, with a t too small for
// the tensor) lets a quotient reach 7; elements past 7 in the same blocks are counted too.
TEST_P(BlockKernelPaths, Nvfp4SaturationNearTheOverflowMidpointIsCounted) {
  std::mt19937_64 rng(17);
  size_t counted = 0;
  for (const float t : {0.01f, 3.1e-7f, 0.7f}) {
    const float f = scalar::mulRn(448.0f, t);
    ASSERT_EQ(scalar::nvfp4BlockScaleCode(7.0f * f, t), 0x7e) << "t " << t;  // the scale saturates at 448
    std::vector<float> x;
    while (x.size() < 256 * 64) {
      const float near = std::bit_cast<float>(std::bit_cast<uint32_t>(7.0f * f) + static_cast<uint32_t>(rng() % 9) - 4u);
      x.push_back(rng() % 2 ? -near : near);
      for (int i = 1; i < 16; ++i) {
        const float v = rng() % 4 == 0 ? std::bit_cast<float>(std::bit_cast<uint32_t>(near) + static_cast<uint32_t>(rng() % 9) - 4u)
                                       : near * static_cast<float>(rng() % 1000) / 1000.0f;
        x.push_back(rng() % 2 ? -v : v);
      }
    }
    const Packed want = nvfp4OnPathAsScalar(GetParam(), x, 16, t);
    ASSERT_GT(want.saturated, 0u);
    ASSERT_LT(want.saturated, x.size() / 4);  // some near values are just below the midpoint
    counted += want.saturated;
  }
  std::printf("nvfp4 saturation near the overflow midpoint: %zu values counted on the %s path\n", counted,
              cpuPathName(GetParam()));
}

// int8's block encoder (nearest and stochastic rounding, with and without the residual) on every path
// against the scalar reference, bit for bit: codes, scale, residual and the non-finite report, at block
// lengths on both sides of the AVX-512 kernel's 128 and of every vector tail.
TEST_P(BlockKernelPaths, Int8BlocksGiveTheScalarBytes) {
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; n += 7) lengths.push_back(n);
  for (const size_t n : {127, 128, 129, 256, 1000, 4096}) lengths.push_back(n);
  size_t compared = 0;
  for (const size_t n : lengths)
    for (const uint32_t rounding : {0u, 16u, 8u})  // nearest, or stochastic with fields of that width
      for (const bool withResidual : {false, true})
        for (const bool nonFinite : {false, true}) {
          if (nonFinite && n == 0) continue;
          SCOPED_TRACE(::testing::Message() << "n " << n << " rounding bits " << rounding << " residual " << withResidual
                                            << " nonFinite " << nonFinite);
          const auto x = inputs(n, n * 7 + (rounding != 0), nonFinite);
          std::vector<uint32_t> words;  // from element 3: the fields start inside a Philox call
          const RoundingFields u =
              rounding ? fillRoundingFields(scalar::RngStream::make(3, 0, 1, 2).withRoundingBits(rounding), 3, n, words)
                       : RoundingFields{};
          struct Result {
            std::vector<int8_t> codes;
            std::vector<uint32_t> residual;
            uint32_t scale = 0;
            bool nonFinite = false;
            bool operator==(const Result&) const = default;
          };
          const auto encode = [&](CpuPath path) {
            setCpuPath(path);
            Result r;
            r.codes.assign(n, 0);
            std::vector<float> residual(n, -1.0f);
            r.scale = std::bit_cast<uint32_t>(encodeInt8Block(x.data(), n, u, r.codes.data(),
                                                              &r.nonFinite, withResidual ? residual.data() : nullptr));
            if (r.nonFinite) return Result{{}, {}, 0, true};  // the codes are then unspecified
            for (const float v : residual) r.residual.push_back(std::bit_cast<uint32_t>(v));
            return r;
          };
          const Result want = encode(CpuPath::Scalar);
          ASSERT_EQ(want.nonFinite, nonFinite);
          const Result got = encode(GetParam());
          ASSERT_EQ(got.nonFinite, want.nonFinite);
          ASSERT_EQ(got.scale, want.scale);
          ASSERT_EQ(got.codes, want.codes);
          for (size_t i = 0; i < got.residual.size(); ++i)
            ASSERT_EQ(got.residual[i], want.residual[i]) << "residual " << i << " x " << x[i];
          ++compared;
        }
  std::printf("int8 blocks (nearest, stochastic, residual): %zu cases on the %s path equal the scalar reference\n",
              compared, cpuPathName(GetParam()));
}

// A block maximum in [1, 2) whose scaled value fl(a x blockScale(a, maxCode)) lies above maxCode, and a
// block of n values a, -a, a / 4, ... with 16-bit rounding fields made by hand: the largest (0xffff,
// u = 1 - 2^-17) on the a's, the smallest (0, u = 2^-17) elsewhere.
struct RangeEdgeBlock {
  float a = 1.0f;
  std::vector<float> x;
  std::vector<uint32_t> words;
  RangeEdgeBlock(float maxCode, size_t n) : x(n), words((n + 1) / 2, 0) {
    for (int tries = 0; tries < 100000 && !(a * blockScale(a, maxCode) > maxCode); ++tries) a = std::nextafter(a, 2.0f);
    for (size_t i = 0; i < n; ++i) {
      x[i] = i % 3 == 0 ? a : i % 3 == 1 ? -a : 0.25f * a;
      if (i % 3 == 0) words[i / 2] |= 0xffffu << (16 * (i % 2));
    }
  }
  RoundingFields fields() const { return {words.data(), 0, 16}; }
};

// The clamp to [-127, 127] where it bites: a block maximum a whose scaled value fl(a x blockScale(a, 127))
// lies above 127 (by an ulp, 2^-17), with the largest uniform 1 - 2^-17 takes a to floor(127 + 2^-17 + u)
// = 128, which must come out as the scalar clamp's 127 (the AVX2 path clamps after the byte packs: a
// saturating pack gives 127), in the 32-value steps, the 8-value steps and the tail (n = 64 + 8 + 3). -a
// with the smallest uniform 2^-17 reaches -127 (no uniform of 8 or 16 bits is small enough to carry it
// past: the byte maximum the AVX2 path keeps for -128 is not reached from a finite block).
TEST_P(BlockKernelPaths, Int8CodesBeyondTheRangeAreClampedLikeTheScalarPath) {
  const size_t n = 64 + 8 + 3;
  const RangeEdgeBlock edge(127.0f, n);
  const float scale = blockScale(edge.a, 127.0f);
  ASSERT_GT(edge.a * scale, 127.0f) << "no block maximum in [1, 2) scales above 127";
  const std::vector<float>& x = edge.x;
  const RoundingFields u = edge.fields();
  ASSERT_EQ(std::floor(x[0] * scale + u.uniform(0)), 128.0f) << "the largest uniform carries a past 127";
  for (const bool stochastic : {false, true}) {
    const auto encode = [&](CpuPath path) {
      setCpuPath(path);
      std::vector<int8_t> codes(n, 0);
      bool nonFinite = false;
      EXPECT_EQ(std::bit_cast<uint32_t>(encodeInt8Block(x.data(), n, stochastic ? u : RoundingFields{}, codes.data(), &nonFinite)),
                std::bit_cast<uint32_t>(scale));
      return codes;
    };
    const std::vector<int8_t> want = encode(CpuPath::Scalar), got = encode(GetParam());
    for (size_t i = 0; i < n; i += 3) {
      ASSERT_EQ(want[i], 127) << "stochastic " << stochastic << ", element " << i;
      ASSERT_EQ(want[i + 1], -127) << "stochastic " << stochastic << ", element " << i + 1;
    }
    EXPECT_EQ(got, want) << "stochastic " << stochastic;
  }
  // Without the nonFinite check a block with an Inf is encoded at scale 1: +Inf and values beyond the
  // int32 range convert to INT32_MIN on the vector paths, which must still come out as the clamp's +-127
  // (a byte-domain clamp would turn +Inf into -127).
  std::vector<float> big(64, 0.5f);
  big[5] = INFINITY;
  big[17] = 3.0e9f;
  big[40] = -3.0e9f;
  big[63] = -INFINITY;
  for (const bool stochastic : {false, true}) {
    const std::vector<uint32_t> halves(32, 0x80008000u);  // every uniform 1/2 + 2^-17
    const auto encode = [&](CpuPath path) {
      setCpuPath(path);
      std::vector<int8_t> codes(64, 0);
      EXPECT_EQ(encodeInt8Block(big.data(), 64, stochastic ? RoundingFields{halves.data(), 0, 16} : RoundingFields{},
                                codes.data()), 1.0f);
      return codes;
    };
    const std::vector<int8_t> want = encode(CpuPath::Scalar), got = encode(GetParam());
    EXPECT_EQ(want[5], 127);
    EXPECT_EQ(want[17], 127);
    EXPECT_EQ(want[40], -127);
    EXPECT_EQ(want[63], -127);
    EXPECT_EQ(got, want) << "stochastic " << stochastic;
  }
}

// The same edge for int4 (clamp to [-7, 7], 4-bit two's complement): the AVX2 group encoder clamps the
// packed bytes (storeClampedNibbles64), the other paths the lanes. Two groups of 8 blocks of 64, a rest of
// 64 and a tail of 3; every block has the maximum a, so every block's scale is blockScale(a, 7). a x s
// exceeds 7 by an ulp of 7 (2^-21), less than the largest uniform's gap below 1 (2^-17): stochastic
// rounding gives 7 there, and the nibble must not wrap to -8 on any path.
TEST_P(BlockKernelPaths, Int4CodesBeyondTheRangeAreClampedLikeTheScalarPath) {
  const size_t n = 2 * 512 + 64 + 3;
  const RangeEdgeBlock edge(7.0f, n);
  ASSERT_GT(edge.a * blockScale(edge.a, 7.0f), 7.0f) << "no block maximum in [1, 2) scales above 7";
  const std::vector<float>& x = edge.x;
  const RoundingFields u = edge.fields();
  for (const bool stochastic : {false, true}) {
    const auto encode = [&](CpuPath path) {
      setCpuPath(path);
      std::vector<uint8_t> packed((n + 1) / 2, 0xee);
      std::vector<float> scales((n + 63) / 64, -1.0f);
      uint64_t bad = ~uint64_t{0};
      encodeInt4Blocks(x.data(), n, 64, stochastic ? u : RoundingFields{}, scales.data(), packed.data(), &bad);
      EXPECT_EQ(bad, ~uint64_t{0});
      return packed;
    };
    const std::vector<uint8_t> want = encode(CpuPath::Scalar), got = encode(GetParam());
    const auto code = [&](size_t i) { return (want[i / 2] >> (4 * (i % 2))) & 0xfu; };
    for (size_t i = 0; i + 1 < n; i += 3) {
      ASSERT_EQ(code(i), 7u) << "stochastic " << stochastic << ", element " << i;
      ASSERT_EQ(code(i + 1), 9u) << "stochastic " << stochastic << ", element " << i + 1;  // -7
    }
    EXPECT_EQ(got, want) << "stochastic " << stochastic;
  }
}

// int8's tile encoder (encodeInt8Blocks: on AVX-512 up to 16 blocks per phase) against encodeInt8Block
// block by block on the scalar path: scales, codes and residual bits, for block sizes that take the phased
// loop (from 128) and ones that do not, tiles of whole groups, a partial group and a short last block,
// and a NaN/Inf in a block past the first group, whose start it returns with every earlier block encoded.
TEST_P(BlockKernelPaths, Int8TilesGiveTheBlockByBlockBytes) {
  size_t compared = 0;
  for (const size_t blockSize : {size_t{256}, size_t{128}, size_t{200}, size_t{64}})
    for (const size_t n : {blockSize * 16, blockSize * 16 + 1, blockSize * 37 + blockSize / 3, size_t{1000}})
      for (const uint32_t rounding : {0u, 16u, 8u})  // nearest, or stochastic with fields of that width
        for (const bool withResidual : {false, true})
          // Where the NaN/Inf goes (n: none): past the first group of 16 blocks for the longer tiles; the
          // last value (the short last block, whose maximum the AVX2 groups take by blockAmax); the first
          // block of a later group (8 blocks on AVX2, 16 on AVX-512), so that group encodes nothing.
          for (const size_t badAt : {n, n - 1 - n / 5, n - 1, 8 * blockSize, 16 * blockSize}) {
            if (badAt > n) continue;
            const bool nonFinite = badAt < n;
            SCOPED_TRACE(::testing::Message() << "block " << blockSize << " n " << n << " rounding bits " << rounding
                                              << " residual " << withResidual << " bad at " << badAt);
            const bool stochastic = rounding != 0;
            auto x = inputs(n, n * 5 + blockSize + stochastic, false);
            if (nonFinite) x[badAt] = stochastic ? std::numeric_limits<float>::quiet_NaN() : INFINITY;
            std::vector<uint32_t> words;
            const RoundingFields u =
                stochastic ? fillRoundingFields(scalar::RngStream::make(5, 1, 2, 3).withRoundingBits(rounding), 0, n, words)
                           : RoundingFields{};
            const size_t blocks = (n + blockSize - 1) / blockSize;
            // Expected: block by block on the scalar path, up to the first non-finite block.
            setCpuPath(CpuPath::Scalar);
            std::vector<int8_t> wantCodes(n, 0);
            std::vector<float> wantScales(blocks, -1.0f), wantResidual(n, -1.0f);
            size_t wantBad = n;
            for (size_t b0 = 0; b0 < n && wantBad == n; b0 += blockSize) {
              bool bad = false;
              const float scale = encodeInt8Block(x.data() + b0, std::min(blockSize, n - b0), u.from(b0),
                                                  wantCodes.data() + b0, &bad, withResidual ? wantResidual.data() + b0 : nullptr);
              if (bad) {
                wantBad = b0;
                std::fill(wantCodes.begin() + static_cast<std::ptrdiff_t>(b0), wantCodes.end(), int8_t{0});
                std::fill(wantResidual.begin() + static_cast<std::ptrdiff_t>(b0), wantResidual.end(), -1.0f);
              } else {
                wantScales[b0 / blockSize] = scale;
              }
            }
            ASSERT_EQ(wantBad == n, !nonFinite);
            setCpuPath(GetParam());
            std::vector<int8_t> codes(n, 0);
            std::vector<float> scales(blocks, -1.0f), residual(n, -1.0f);
            const size_t bad = encodeInt8Blocks(x.data(), n, blockSize, u, scales.data(),
                                                codes.data(), withResidual ? residual.data() : nullptr);
            ASSERT_EQ(bad, wantBad);
            // Past the bad block the codes and residual are unspecified (the codec reports the NaN/Inf).
            for (size_t i = 0; i < wantBad; ++i) {
              ASSERT_EQ(codes[i], wantCodes[i]) << "code " << i;
              ASSERT_EQ(std::bit_cast<uint32_t>(residual[i]), std::bit_cast<uint32_t>(wantResidual[i])) << "residual " << i;
            }
            for (size_t b = 0; b < (wantBad == n ? blocks : wantBad / blockSize); ++b)  // a short last block too
              ASSERT_EQ(std::bit_cast<uint32_t>(scales[b]), std::bit_cast<uint32_t>(wantScales[b])) << "scale " << b;
            ++compared;
          }
  EXPECT_EQ(compared, 438u);  // 4 block sizes x 4 lengths x 3 x 2, each finite and with 1-4 bad positions
  std::printf("int8 tiles: %zu cases on the %s path equal the block-by-block scalar encode\n", compared,
              cpuPathName(GetParam()));
}

// int4's block scales are blockScaleFor(amax, 7) on every path: for block maxima across the top 2^17
// floats below FLT_MAX (where a scale whose reciprocal x 7 overflows would be raised), subnormals up to
// 2^-126 every 977th step (where 7 / amax overflows to FLT_MAX), zero (scale 1), and one per binade;
// 16 blocks of 64 per 1024 values, as the AVX-512 group encoder takes them, each block holding its
// maximum at a varying position and smaller values around it.
TEST_P(BlockKernelPaths, Int4GroupScalesAreBlockScaleFor) {
  std::vector<float> maxima{0.0f};
  const uint32_t top = std::bit_cast<uint32_t>(std::numeric_limits<float>::max());
  for (uint32_t k = 0; k < (1u << 17); ++k) maxima.push_back(std::bit_cast<float>(top - k));
  for (uint32_t b = 1; b < 0x00800000u; b += 977) maxima.push_back(std::bit_cast<float>(b));
  for (uint32_t e = 1; e < 255; ++e) maxima.push_back(std::bit_cast<float>((e << 23) | (e * 12345u & 0x7fffffu)));
  while (maxima.size() % 16) maxima.push_back(1.0f);
  constexpr size_t kBlock = 64;
  const size_t n = maxima.size() * kBlock;
  std::vector<float> x(n);
  for (size_t b = 0; b < maxima.size(); ++b)
    for (size_t i = 0; i < kBlock; ++i) {
      const float m = maxima[b] * (b % 2 ? -1.0f : 1.0f);
      x[b * kBlock + i] = i == (b * 7) % kBlock ? m : m * (static_cast<float>(i % 5) * 0.125f);
    }
  std::vector<float> want(maxima.size()), got(maxima.size());
  std::vector<uint8_t> wantCodes(n / 2), gotCodes(n / 2);
  setCpuPath(CpuPath::Scalar);
  encodeInt4Blocks(x.data(), n, kBlock, {}, want.data(), wantCodes.data());
  setCpuPath(GetParam());
  encodeInt4Blocks(x.data(), n, kBlock, {}, got.data(), gotCodes.data());
  for (size_t b = 0; b < maxima.size(); ++b) {
    ASSERT_EQ(std::bit_cast<uint32_t>(want[b]), std::bit_cast<uint32_t>(scalar::blockScaleFor(maxima[b], 7.0f)))
        << "block " << b << " amax " << maxima[b];
    ASSERT_EQ(std::bit_cast<uint32_t>(got[b]), std::bit_cast<uint32_t>(want[b])) << "block " << b << " amax " << maxima[b];
  }
  ASSERT_EQ(gotCodes, wantCodes);
}

// The MX and NVFP4 encoders with error feedback's residual (on AVX-512 the codes are decoded in
// registers): the same payload as the plain encode, and residual = x - the packed decoder's value, bit for
// bit, on every path; NVFP4 with the three tensor scales above (saturating blocks, and zero-factor blocks
// whose +-0 and tiny values must give x - (+0), not x - (-0)); lengths around whole 256-value groups,
// block sizes 16, 32 and 24.
TEST_P(BlockKernelPaths, ResidualEqualsXMinusTheDecodedValues) {
  size_t compared = 0;
  for (int kind = 0; kind <= 5; ++kind)
    for (const float t : kind == 5 ? std::vector<float>{0.0125f, 0x1p-126f, 0x1p100f} : std::vector<float>{0.0f})
      for (const size_t blockSize : {size_t{16}, size_t{32}, size_t{24}})
        for (const size_t n : {size_t{0}, size_t{15}, size_t{100}, size_t{256}, size_t{528}, size_t{4099}}) {
          SCOPED_TRACE(::testing::Message() << "kind " << kind << " t " << t << " block " << blockSize << " n " << n);
          const auto x = inputs(n, n * 7 + blockSize + static_cast<size_t>(kind), false);
          const size_t blocks = (n + blockSize - 1) / blockSize;
          const auto fmt = static_cast<ElementFormat>(kind);
          setCpuPath(GetParam());
          std::vector<uint8_t> codes(n + 16, 0xee), scaleCodes(blocks), fusedCodes(n + 16, 0xee), fusedScales(blocks);
          std::vector<float> decoded(n), residual(n + 1, -1.0f);
          uint64_t saturated = 0, fusedSaturated = 0;
          if (kind < 5) {
            saturated = encodeMxBlocksPacked(x.data(), n, blockSize, fmt, codes.data(), scaleCodes.data());
            decodeMxBlocksPacked(codes.data(), n, blockSize, fmt, scaleCodes.data(), decoded.data(), false);
            fusedSaturated = encodeMxBlocksPackedWithResidual(x.data(), n, blockSize, fmt, fusedCodes.data(),
                                                              fusedScales.data(), residual.data());
          } else {
            saturated = encodeNvfp4BlocksPacked(x.data(), n, blockSize, t, codes.data(), scaleCodes.data());
            decodeNvfp4BlocksPacked(codes.data(), n, blockSize, scaleCodes.data(), t, decoded.data(), false);
            fusedSaturated = encodeNvfp4BlocksPackedWithResidual(x.data(), n, blockSize, t, fusedCodes.data(),
                                                                 fusedScales.data(), residual.data());
          }
          ASSERT_EQ(fusedCodes, codes);
          ASSERT_EQ(fusedScales, scaleCodes);
          ASSERT_EQ(fusedSaturated, saturated);
          for (size_t i = 0; i < n; ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(residual[i]), std::bit_cast<uint32_t>(x[i] - decoded[i])) << i;
          ASSERT_EQ(residual[n], -1.0f);  // nothing written past the end
          compared += n;
        }
  std::printf("mx / nvfp4 fused residual: %zu elements on the %s path equal x - decoded\n", compared,
              cpuPathName(GetParam()));
}

// The stochastic level encoders' tile entry points (qsgd 4 and 8 bits, terngrad): the codes packed from
// registers on the vector path against the byte-per-code scalar rule and packBits, with the norms and
// maxima the inputs' specials push past 2^100 (the normalized-ratio blocks) and a NaN/Inf for terngrad,
// whose tile encoder finds it.
struct LevelTile {
  std::vector<uint8_t> packed;
  std::vector<float> maxima;
  size_t firstBad = 0;
  bool operator==(const LevelTile&) const = default;
};

// The tile's uniforms: the fields of elements first .. first + n - 1 at roundingBits (8 or 16). The codecs
// start their tiles on whole Philox calls; a first inside a call takes the vector loads off that grid.
LevelTile runLevel(CpuPath path, int bits, const std::vector<float>& x, size_t blockSize, uint32_t roundingBits,
                   uint64_t first) {
  setCpuPath(path);
  const size_t n = x.size(), blocks = (n + blockSize - 1) / blockSize;
  std::vector<uint32_t> words;
  const RoundingFields fields =
      fillRoundingFields(scalar::RngStream::make(9, 0, 1, 2).withRoundingBits(roundingBits), first, n, words);
  LevelTile t;
  t.packed.assign((n * static_cast<size_t>(bits == 0 ? 2 : bits) + 7) / 8 + 16, 0xee);  // bytes past the codes stay
  t.maxima.assign(blocks, 0.0f);
  if (bits == 0) {
    t.firstBad = encodeTernTilePacked(x.data(), n, blockSize, fields, t.maxima.data(), t.packed.data());
  } else {
    std::vector<float> norms(blocks);
    for (size_t b = 0; b < blocks; ++b)
      norms[b] = scalar::qsgdWireNorm(blockSumSquares(x.data() + b * blockSize, std::min(blockSize, n - b * blockSize)),
                                      scalar::qsgdLevels(bits));
    encodeQsgdTilePacked(x.data(), n, blockSize, bits, norms.data(), fields, t.packed.data());
    t.firstBad = n;
  }
  return t;
}

class LevelKernelPaths : public CpuPathTest {};

TEST_P(LevelKernelPaths, EveryLengthGivesTheScalarBytes) {
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 100; ++n) lengths.push_back(n);
  lengths.push_back(4099);
  size_t compared = 0;
  // Both field widths (the vector routes are templates on the width), each from a call's start and from
  // inside a call.
  const std::vector<std::pair<uint32_t, uint64_t>> widthsAndStarts = {{16, 0}, {8, 0}, {16, 5}, {8, 3}};
  for (const auto& [roundingBits, first] : widthsAndStarts)
  for (const int bits : {4, 8, 0}) {  // 0: terngrad
    // 48, 80, 96: whole blocks that are 64-code steps and a rest of 16 or 32 (the AVX2 packers' second loop).
    for (const size_t blockSize : {size_t{512}, size_t{64}, size_t{16}, size_t{24}, size_t{48}, size_t{80}, size_t{96}})
      for (const size_t n : lengths)
        for (const bool nonFinite : {false, true})
          for (const bool moderate : {false, true}) {
            if (nonFinite && (n == 0 || bits != 0)) continue;  // qsgd's finite check is its caller's (the sums)
            // moderate: the inputs again without the values near FLT_MAX, which put nearly every long
            // block's norm past 2^100, where qsgd's ratio takes the scalar rule; so the vector loops (the
            // 64-code packing and its 16-code rest among them) see long blocks too.
            if (moderate && n < 65) continue;
            SCOPED_TRACE(::testing::Message() << "rounding bits " << roundingBits << " first " << first << " bits "
                                              << bits << " block " << blockSize << " n " << n << " nonFinite "
                                              << nonFinite << " moderate " << moderate);
            auto x = inputs(n, n * 17 + static_cast<uint64_t>(bits), nonFinite);
            if (moderate) {
              for (float& v : x)
                if (std::isfinite(v) && std::fabs(v) > 1e30f) v = v > 0 ? 1.5f : -2.5f;  // the NaN/Inf stays
              // One block of values near 2^-120: its norm (or maximum) below 2^-100, where the ratio takes
              // the scalar rule's pre-scaling, between vector blocks.
              for (size_t i = blockSize; i < std::min(n, 2 * blockSize); ++i)
                if (std::isfinite(x[i])) x[i] = (i % 3 == 0 ? -0x1.8p-120f : 0x1.2p-121f) * static_cast<float>(1 + i % 5);
            }
            const LevelTile want = runLevel(CpuPath::Scalar, bits, x, blockSize, roundingBits, first);
            const LevelTile got = runLevel(GetParam(), bits, x, blockSize, roundingBits, first);
            ASSERT_EQ(got.firstBad, want.firstBad);
            if (nonFinite) {
              ASSERT_LT(got.firstBad, n);
            } else {
              ASSERT_EQ(got.firstBad, n);
              ASSERT_EQ(got.packed, want.packed);
              ASSERT_EQ(got.maxima, want.maxima);
            }
            ++compared;
          }
  }
  std::printf("level kernels (qsgd 4 / 8 bits, terngrad: packed tile encode): %zu cases on the %s path equal the "
              "scalar reference\n", compared, cpuPathName(GetParam()));
}

// TernGrad's tile decoder reading the 2-bit codes from the payload in registers, against the scalar unpack and
// decodeTernBlock: random bytes (every code, 3 included, which the validator rejects and both decode as
// +0), overwrite and accumulate into a buffer holding -0 (so a skipped add of a zero shows), every length
// to 100 and one past 4096, block sizes that take the vector path (multiples of 16) and ones that do not.
std::vector<float> runTernDecode(CpuPath path, const std::vector<uint8_t>& packed, size_t n, size_t blockSize,
                                 const std::vector<float>& maxima, bool accumulate) {
  setCpuPath(path);
  std::vector<float> out(n + 1, 7.0f);  // one past the end: must stay
  for (size_t i = 0; i < n; ++i) out[i] = i % 3 == 0 ? -0.0f : static_cast<float>(i % 7) - 3.5f;
  decodeTernTilePacked(packed.data(), n, blockSize, maxima.data(), out.data(), accumulate);
  return out;
}

// qsgd's level clamp. A block's own norm keeps fl(|x| fl(7 / norm)) within a few ulps of 7, and the
// largest uniform a 16-bit field gives is 1 - 2^-17, so a level never reaches 8 from the codec's norms
// (checked below for the a whose ratio passes 7): the top level is 7 (first part). Given a norm below
// its value (outside the codec's use, ratio 7.75) the level 8 is clamped to s = 7 as the scalar rule
// clamps it: code 7, or 15 with the sign (second part). The AVX2 route clamps the signed levels on packed
// bytes (storeQsgd4Codes64); the zeros around them stay level 0. Blocks of 64 (one 64-code step each)
// and of 80 (a step and a rest of 16).
TEST_P(LevelKernelPaths, QsgdLevelsBeyondTheTopAreClampedLikeTheScalarPath) {
  const int s = scalar::qsgdLevels(4);
  float a = 1.0f;
  const auto ratioOf = [&](float v) { return v * scalar::ratioScaling(static_cast<float>(s), scalar::qsgdWireNorm(double{v} * v, s)).inv; };
  for (int tries = 0; tries < 100000 && !(ratioOf(a) > 7.0f); ++tries) a = std::nextafter(a, 2.0f);
  ASSERT_GT(ratioOf(a), 7.0f) << "no norm in [1, 2) scales its value above 7";
  ASSERT_LT(ratioOf(a) + (1.0f - 0x1p-17f), 8.0f) << "a level of 8 is reachable from a block's own norm";
  for (const float normOverA : {1.0f, 7.0f / 7.75f}) {
    for (const size_t blockSize : {size_t{64}, size_t{80}}) {
      const size_t blocks = 6, n = blocks * blockSize;
      std::vector<float> x(n, 0.0f), norms(blocks);
      const std::vector<uint32_t> allOnes(n / 2, 0xffffffffu);  // every 16-bit field 0xffff: u = 1 - 2^-17
      for (size_t b = 0; b < blocks; ++b) {
        x[b * blockSize + (b * 29) % blockSize] = b % 2 ? -a : a;  // the maximum at varying positions
        norms[b] = normOverA == 1.0f ? scalar::qsgdWireNorm(double{a} * a, s) : a * normOverA;
      }
      const auto encode = [&](CpuPath path) {
        setCpuPath(path);
        std::vector<uint8_t> packed(n / 2, 0xee);
        const RoundingFields largest{allOnes.data(), 0, 16};
        encodeQsgdTilePacked(x.data(), n, blockSize, 4, norms.data(), largest, packed.data());
        return packed;
      };
      const std::vector<uint8_t> want = encode(CpuPath::Scalar), got = encode(GetParam());
      for (size_t i = 0; i < n; ++i) {
        const unsigned code = (want[i / 2] >> (4 * (i % 2))) & 0xfu;
        ASSERT_EQ(code, x[i] == 0.0f ? 0u : x[i] > 0.0f ? 7u : 15u)
            << "norm / a " << normOverA << ", block size " << blockSize << ", element " << i;
      }
      EXPECT_EQ(got, want) << "norm / a " << normOverA << ", block size " << blockSize;
    }
  }
}

TEST_P(LevelKernelPaths, TernDecodeGivesTheScalarBits) {
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 100; ++n) lengths.push_back(n);
  lengths.push_back(4099);
  size_t compared = 0;
  for (const size_t blockSize : {size_t{512}, size_t{64}, size_t{16}, size_t{24}})
    for (const size_t n : lengths) {
      const auto s = scalar::RngStream::make(n, blockSize, 5, 6);
      std::vector<uint8_t> packed((n + 3) / 4 + 4);
      for (size_t b = 0; b < packed.size(); ++b) packed[b] = static_cast<uint8_t>(s.word(b));
      std::vector<float> maxima((n + blockSize - 1) / blockSize);
      for (size_t b = 0; b < maxima.size(); ++b) maxima[b] = scalar::uniform01(s.word(1000000 + b)) * 8.0f + 0.25f;
      for (const bool accumulate : {false, true}) {
        const auto want = runTernDecode(CpuPath::Scalar, packed, n, blockSize, maxima, accumulate);
        const auto got = runTernDecode(GetParam(), packed, n, blockSize, maxima, accumulate);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "block " << blockSize << " n " << n << " accumulate " << accumulate;
        ASSERT_EQ(got[n], 7.0f) << "wrote past the tile, n " << n;
        ++compared;
      }
    }
  std::printf("terngrad packed decode: %zu cases on the %s path equal the scalar reference\n", compared,
              cpuPathName(GetParam()));
}

// int8's overwrite decode with its checks in the same pass (decodeInt8BlocksChecked, the codec's
// per-tile decode): decodeInt8Block's values bit for bit with plain and streamed stores, on aligned and
// unaligned outputs, at block sizes on both sides of the 8-lane loop; and the first element of a block
// with a rejected scale, or the first -128, reported wherever it lies.
TEST(Int8CheckedDecode, GivesDecodeInt8BlocksValuesAndFindsTheFirstBadScaleOrCode) {
  const scalar::ScaleRule rule{.reciprocalOf = 127.0f};
  std::mt19937_64 rng(18);
  size_t compared = 0;
  for (const size_t blockSize : {1ul, 7ul, 8ul, 100ul, 256ul})
    for (const size_t n : {0ul, 5ul, 256ul, 1000ul, 4096ul + 3}) {
      const size_t blocks = (n + blockSize - 1) / blockSize;
      std::vector<int8_t> codes(n);
      for (auto& c : codes) c = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
      std::vector<float> scales(blocks);
      for (auto& s : scales) s = std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, static_cast<int>(rng() % 40) - 20);
      std::vector<float> want(n);
      for (size_t b = 0; b < blocks; ++b)
        decodeInt8Block(codes.data() + b * blockSize, std::min(blockSize, n - b * blockSize), scales[b],
                        want.data() + b * blockSize, false);
      for (const bool stream : {false, true})
        for (const size_t shift : {0ul, 1ul, 4ul}) {  // out 64-byte aligned, one float past it, 16 bytes past it
          std::vector<float> buffer(n + 32, -1.0f);
          const size_t toLine = (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64 / sizeof(float);
          float* out = buffer.data() + toLine + shift;
          ASSERT_EQ(decodeInt8BlocksChecked(codes.data(), n, blockSize, scales.data(), rule, out, stream), n);
          fenceStreamedStores();
          for (size_t i = 0; i < n; ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(want[i]))
                << "block " << blockSize << " n " << n << " stream " << stream << " shift " << shift << " at " << i;
          compared += n;
          if (n == 0) continue;
          // A -128 anywhere, then a rejected scale (zero, negative, NaN, Inf, too small for 127 x 1 / s)
          // in a block before or after it: the earlier is reported.
          const size_t at = rng() % n;
          auto badCodes = codes;
          badCodes[at] = INT8_MIN;
          EXPECT_EQ(decodeInt8BlocksChecked(badCodes.data(), n, blockSize, scales.data(), rule, out, stream), at);
          const float badScales[] = {0.0f, -1.0f, NAN, INFINITY, 1e-38f};
          const size_t block = rng() % blocks;
          auto withBadScale = scales;
          withBadScale[block] = badScales[rng() % std::size(badScales)];
          EXPECT_EQ(decodeInt8BlocksChecked(badCodes.data(), n, blockSize, withBadScale.data(), rule, out, stream),
                    std::min(at, block * blockSize))
              << "scale " << withBadScale[block];
          fenceStreamedStores();
        }
    }
  std::printf("int8 checked decode: %zu values equal decodeInt8Block's\n", compared);
}

// qsgd's sums of squares, several blocks at a time (blockSumSquaresEach) against the order blockSumSquares
// documents, written out: element i adds its exact double square to lane i mod 4 of its block, in order,
// and the block's sum is (lane 0 + lane 1) + (lane 2 + lane 3). Bit for bit, for block sizes that take the
// eight- and four-block loops (multiples of 8) and ones that do not, with a short last block and a non-finite value.
TEST(BlockSumSquares, EveryBlockInAnyGroupingEqualsTheDocumentedOrder) {
  size_t compared = 0;
  for (const size_t blockSize : {size_t{512}, size_t{64}, size_t{8}, size_t{24}, size_t{1000}, size_t{7}})
    for (const size_t n : {size_t{1}, blockSize * 4, blockSize * 4 + 3, blockSize * 9 - 1, blockSize * 13 + blockSize / 2})
      for (const bool nonFinite : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "block " << blockSize << " n " << n << " nonFinite " << nonFinite);
        const auto x = inputs(n, n * 31 + blockSize, nonFinite);
        const size_t blocks = (n + blockSize - 1) / blockSize;
        std::vector<double> sums(blocks, -1.0);
        blockSumSquaresEach(x.data(), n, blockSize, sums.data());
        for (size_t b = 0; b < blocks; ++b) {
          double lane[4] = {0, 0, 0, 0};
          const size_t begin = b * blockSize, end = std::min(n, begin + blockSize);
          for (size_t i = begin; i < end; ++i) lane[(i - begin) % 4] += static_cast<double>(x[i]) * x[i];
          const double want = (lane[0] + lane[1]) + (lane[2] + lane[3]);
          const double single = blockSumSquares(x.data() + begin, end - begin);
          ASSERT_EQ(std::isnan(sums[b]), std::isnan(want)) << "block " << b;
          ASSERT_EQ(std::isnan(single), std::isnan(want)) << "block " << b;
          if (!std::isnan(want)) {
            ASSERT_EQ(std::bit_cast<uint64_t>(sums[b]), std::bit_cast<uint64_t>(want)) << "block " << b;
            ASSERT_EQ(std::bit_cast<uint64_t>(single), std::bit_cast<uint64_t>(want)) << "block " << b;
          }
          ++compared;
        }
      }
  EXPECT_EQ(compared, 396u);  // 6 block sizes x 5 lengths x 2, every block of each
}

// The whole-tensor maxima (NVFP4's tensor scale, a rotated tensor's): |x| and |g + e| as fp32 bits on this
// path against a plain loop, at every length through the 64-value unrolled loop's tails and past the
// 4096 where it starts, with the largest magnitude negative and moved across every position class
// (each of the four accumulators, the 16-lane tail, the masked tail), and a NaN or an Inf that must win.
class TensorAmaxPaths : public CpuPathTest {};

TEST_P(TensorAmaxPaths, EveryLengthAndPositionGivesThePlainLoopsMaximum) {
  setCpuPath(GetParam());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 80; ++n) lengths.push_back(n);
  for (const size_t n : {4095, 4096, 4097, 4096 + 63, 4096 + 64 + 17, 70001}) lengths.push_back(n);
  size_t compared = 0;
  for (const size_t n : lengths) {
    std::mt19937_64 rng(n);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> g(n), e(n);
    for (size_t i = 0; i < n; ++i) {
      g[i] = normal(rng);
      e[i] = normal(rng) * 0.5f;
    }
    std::vector<size_t> positions = {0, n / 2, n - (n > 0)};
    for (size_t p = n > 4096 ? n - 130 : 0; p < n; p += n > 4096 ? 7 : 1) positions.push_back(p);
    for (const size_t pos : positions) {
      for (const float special : {-1e3f, std::numeric_limits<float>::quiet_NaN(), INFINITY}) {
        if (n == 0) continue;
        std::vector<float> x = g, ee = e;
        x[pos] = special;
        ee[pos] = special == -1e3f ? -7.0f : 0.0f;
        uint32_t want = 0, wantSum = 0;
        for (size_t i = 0; i < n; ++i) {
          want = std::max(want, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
          wantSum = std::max(wantSum, std::bit_cast<uint32_t>(x[i] + ee[i]) & 0x7fffffffu);
        }
        ASSERT_EQ(std::bit_cast<uint32_t>(absMax(x.data(), n)), want) << "n " << n << " at " << pos;
        ASSERT_EQ(std::bit_cast<uint32_t>(absMaxOfSum(x.data(), ee.data(), n)), wantSum) << "n " << n << " at " << pos;
        ++compared;
      }
    }
  }
  EXPECT_EQ(std::bit_cast<uint32_t>(absMax(nullptr, 0)), 0u);
  EXPECT_GT(compared, 12000u);
}

INSTANTIATE_TEST_SUITE_P(CpuPaths, TensorAmaxPaths, ::testing::Values(CpuPath::Avx512, CpuPath::Avx2),
                         cpuPathTestName);

INSTANTIATE_TEST_SUITE_P(CpuPaths, LevelKernelPaths, ::testing::Values(CpuPath::Avx512, CpuPath::Avx2),
                         cpuPathTestName);

INSTANTIATE_TEST_SUITE_P(CpuPaths, BlockKernelPaths, ::testing::Values(CpuPath::Avx512, CpuPath::Avx2),
                         cpuPathTestName);

}  // namespace
}  // namespace gradcomp::cpu
