// Stochastic codecs are unbiased: the mean of decode(encode(x)) over many independent steps converges
// to x. Bound: |mean - x| <= 5 standard errors (per-step spread is at most one quantization step), a
// false failure rate below 1e-6 per element checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "compressors/wire_format.h"
#include "core/error.h"
#include "kernels/cpu/bit_pack.h"
#include "kernels/cpu/level_kernels.h"
#include "kernels/scalar/level_codes.h"
#include "kernels/scalar/philox.h"
#include "kernels/scalar/scale_limits.h"

#include "compressors/registry.h"
#include "tests/compressors/codec_test_util.h"

namespace gradcomp {
namespace {

// A stochastic codec and a bound on its quantization step in units of max |x| (the bias allowance below).
struct UnbiasedCase {
  std::string spec;
  double stepPerMax;  // int8: amax / 127; int4: amax / 7; terngrad: amax; qsgd: norm / s <= sqrt(64) amax / s
};

class Unbiased : public ::testing::TestWithParam<UnbiasedCase> {};

TEST_P(Unbiased, MeanOfDecodesConvergesToInput) {
  const std::string spec = GetParam().spec;
  auto c = makeCompressor(spec);
  const size_t n = 64;
  // Kept away from 0 (|x| >= 0.5): an element whose chance of rounding up is below 1/4000 may see no hit
  // at all in 4000 trials, and then its sample spread (0) says nothing; the exact test below covers the
  // rounding of any value.
  auto x = testing::normalVector(n, 21);
  for (float& v : x) v += std::copysign(0.5f, v);
  double maxAbs = 0;
  for (float v : x) maxAbs = std::max(maxAbs, double(std::fabs(v)));
  // Rounding uniforms of b bits leave a bias of at most 2^-(b+1) of a step (RoundingUniforms below): at
  // b = 8 an element within 2^-9 of a step above a level never rounds up, and the spread says nothing.
  const int roundingBits = spec.find("rounding_bits=8") != std::string::npos ? 8 : 16;
  const double biasBound = std::ldexp(GetParam().stepPerMax * maxAbs, -(roundingBits + 1));
  const int trials = 4000;
  std::vector<double> sum(n, 0), sumSq(n, 0);
  EncodeContext ctx;
  ctx.seed = 17;
  for (int t = 0; t < trials; ++t) {
    ctx.step = static_cast<uint32_t>(t);
    const auto d = testing::decodeToVector(*c, testing::encodeToVector(*c, x, ctx), n);
    for (size_t i = 0; i < n; ++i) {
      sum[i] += d[i];
      sumSq[i] += double(d[i]) * d[i];
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const double mean = sum[i] / trials, var = std::max(0.0, sumSq[i] / trials - mean * mean);
    const double se = std::sqrt(var / trials) + 1e-7;
    EXPECT_LE(std::fabs(mean - x[i]), 5 * se + biasBound + 1e-5) << spec << " element " << i << " x=" << x[i];
  }
}

INSTANTIATE_TEST_SUITE_P(StochasticCodecs, Unbiased,
                         ::testing::Values(UnbiasedCase{"int8:rounding=stochastic,block=64", 1.0 / 127},
                                           UnbiasedCase{"qsgd:bits=2,block=64", 8.0}, UnbiasedCase{"qsgd:bits=4", 8.0 / 7},
                                           UnbiasedCase{"terngrad:block=64", 1.0},
                                           UnbiasedCase{"int4:rounding=stochastic,block=16", 1.0 / 7},
                                           UnbiasedCase{"int8:rounding=stochastic,block=64,rounding_bits=8", 1.0 / 127},
                                           UnbiasedCase{"qsgd:bits=2,block=64,rounding_bits=8", 8.0},
                                           UnbiasedCase{"terngrad:block=64,rounding_bits=8", 1.0},
                                           UnbiasedCase{"int4:rounding=stochastic,block=16,rounding_bits=8", 1.0 / 7},
                                           UnbiasedCase{"randomk:ratio=0.25,unbiased=true", 0.0}),
                         [](const auto& p) {
                           std::string s = p.param.spec;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// The uniforms of stochastic rounding have b random bits, b = 16 or 8 (kernels/scalar/philox.h): over all
// 2^b equally likely draws, floor(v + u) averages to v within 2^-(b + 1), and P(u < r) (terngrad's keep
// test) is r within the same bound. Exact: every draw is enumerated. The bound is also reached (at
// v = 2^-(b+1)), so it is the true worst case, not a loose one.
class RoundingUniforms : public ::testing::TestWithParam<uint32_t> {};

TEST_P(RoundingUniforms, BiasIsWithinHalfAGridStepForEveryFraction) {
  const uint32_t bits = GetParam();
  const uint32_t draws = 1u << bits;
  const double bound = std::ldexp(1.0, -static_cast<int>(bits + 1));
  std::vector<float> grid(draws);
  for (uint32_t k = 0; k < draws; ++k) grid[k] = (static_cast<float>(k) + 0.5f) / static_cast<float>(draws);
  double worstRound = 0, worstKeep = 0;
  const float half = std::ldexp(1.0f, -static_cast<int>(bits + 1));
  for (float v : {0.0f, 1e-6f, 0.3f, 0.5f, 0.999f, 2.25f, 17.73f, 126.6f, -0.3f, -126.999f, 0x1p-17f, 0.5f + 0x1p-17f,
                  0x1p-9f, 0.5f + 0x1p-9f, 0.75f - 0x1p-10f, half, 1.0f - half, 3.0f + half}) {
    double sum = 0;
    for (float u : grid) sum += std::floor(v + u);
    worstRound = std::max(worstRound, std::fabs(sum / draws - v));
    if (v >= 0 && v <= 1) {
      uint64_t kept = 0;
      for (float u : grid) kept += u < v;
      worstKeep = std::max(worstKeep, std::fabs(double(kept) / draws - v));
    }
  }
  EXPECT_LE(worstRound, bound + 1e-12);
  EXPECT_LE(worstKeep, bound + 1e-12);
  EXPECT_GE(worstRound, bound - 1e-12);  // reached: the stated bound is this width's true worst case
  // And the stream's uniforms at this width are on that grid, in (0, 1).
  const auto s = scalar::RngStream::make(5, 1, 2, 3).withRoundingBits(bits);
  for (uint64_t i = 0; i < 4096; ++i) {
    const float u = scalar::roundingUniform(s, i);
    ASSERT_TRUE(u > 0.0f && u < 1.0f);
    const float k = u * static_cast<float>(draws) - 0.5f;
    ASSERT_EQ(k, std::floor(k));
  }
}

INSTANTIATE_TEST_SUITE_P(FieldWidths, RoundingUniforms, ::testing::Values(16u, 8u),
                         [](const auto& p) { return std::to_string(p.param) + "bits"; });

// rounding_bits=8 draws its uniforms from the 8-bit fields of the encode call's stream (seed, rank, step,
// tensor): the codec's decode equals the scalar rule per element fed them (every one of these codecs'
// kernels takes the fields themselves: an expectation that does not go through those kernels). A codec
// that kept 16-bit fields, or keyed its stream otherwise, would still be unbiased and would fail here.
TEST(RoundingBits, EightBitCodecsRoundWithTheStreamsEightBitFields) {
  const size_t n = 1000, block = 64;
  const auto x = testing::normalVector(n, 5);
  const EncodeContext ctx{99, 2, 7, 3, 0};
  const auto stream = scalar::RngStream::make(ctx.seed, ctx.rank, ctx.step, ctx.tensorId).withRoundingBits(8);
  std::vector<float> u(n);
  for (size_t i = 0; i < n; ++i) u[i] = scalar::roundingUniform(stream, i);
  std::vector<float> expect(n);
  // int8 and int4: scale s = blockScaleFor(block amax, maxCode), code clamp(floor(x s + u), +-maxCode),
  // decoded as code x fl(1 / s).
  const auto symmetricIntValues = [&](float maxCode) {
    for (size_t b0 = 0; b0 < n; b0 += block) {
      const size_t len = std::min(block, n - b0);
      float maxAbs = 0.0f;
      for (size_t i = b0; i < b0 + len; ++i) maxAbs = std::max(maxAbs, std::fabs(x[i]));
      const float scale = scalar::blockScaleFor(maxAbs, maxCode), inv = 1.0f / scale;
      for (size_t i = b0; i < b0 + len; ++i)
        expect[i] = std::clamp(std::floor(x[i] * scale + u[i]), -maxCode, maxCode) * inv;
    }
  };
  {
    symmetricIntValues(127.0f);
    auto c = makeCompressor("int8:rounding=stochastic,block=64,rounding_bits=8");
    EXPECT_EQ(testing::decodeToVector(*c, testing::encodeToVector(*c, x, ctx), n), expect);
  }
  {
    for (size_t b0 = 0; b0 < n; b0 += block) {
      const size_t len = std::min(block, n - b0);
      float maxAbs = 0.0f;
      for (size_t i = b0; i < b0 + len; ++i) maxAbs = std::max(maxAbs, std::fabs(x[i]));
      for (size_t i = b0; i < b0 + len; ++i)
        expect[i] = scalar::ternValue(scalar::ternCode(x[i], maxAbs, u[i]), maxAbs);
    }
    auto c = makeCompressor("terngrad:block=64,rounding_bits=8");
    EXPECT_EQ(testing::decodeToVector(*c, testing::encodeToVector(*c, x, ctx), n), expect);
  }
  for (const int bits : {3, 4, 8}) {  // 4 and 8: the kernels' vector routes; 3: the byte-per-code rule
    for (size_t b0 = 0; b0 < n; b0 += block) {
      const size_t len = std::min(block, n - b0);
      const float norm = scalar::qsgdWireNorm(cpu::blockSumSquares(x.data() + b0, len), scalar::qsgdLevels(bits));
      for (size_t i = b0; i < b0 + len; ++i)
        expect[i] = scalar::qsgdValue(scalar::qsgdCode(x[i], norm, bits, u[i]), norm, bits);
    }
    auto c = makeCompressor("qsgd:bits=" + std::to_string(bits) + ",block=64,rounding_bits=8");
    EXPECT_EQ(testing::decodeToVector(*c, testing::encodeToVector(*c, x, ctx), n), expect) << "qsgd bits " << bits;
  }
  {
    symmetricIntValues(7.0f);
    auto c = makeCompressor("int4:rounding=stochastic,block=64,rounding_bits=8");
    EXPECT_EQ(testing::decodeToVector(*c, testing::encodeToVector(*c, x, ctx), n), expect);
  }
}

// The width is the encoder's choice and travels in the wire: a decoder built at either width reads a
// payload made at the other (decoding never draws uniforms), and gives the same values.
TEST(RoundingBits, EitherWidthDecodesTheOthersPayload) {
  const auto x = testing::normalVector(777, 6);
  for (const char* name : {"qsgd", "terngrad"}) {
    auto sixteen = makeCompressor(name), eight = makeCompressor(std::string(name) + ":rounding_bits=8");
    for (const auto* encoder : {sixteen.get(), eight.get()}) {
      const auto wire = testing::encodeToVector(*encoder, x);
      EXPECT_EQ(testing::decodeToVector(*sixteen, wire, x.size()), testing::decodeToVector(*eight, wire, x.size()))
          << encoder->canonicalSpec();
    }
  }
}

TEST(RoundingBits, IsStochasticOnlyAndEightOrSixteen) {
  for (const char* bad : {"int8:rounding_bits=8", "int4:rounding=nearest,rounding_bits=16", "qsgd:rounding_bits=12",
                          "terngrad:rounding_bits=0", "int8:rounding=stochastic,rounding_bits=eight"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(makeCompressor(bad), InvalidArgument);
  }
  try {
    makeCompressor("int8:rounding_bits=8");
    ADD_FAILURE() << "int8:rounding_bits=8 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rounding_bits= needs rounding=stochastic"), std::string::npos) << e.what();
  }
  try {
    makeCompressor("qsgd:rounding_bits=12");
    ADD_FAILURE() << "qsgd:rounding_bits=12 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rounding_bits=12 is not one of 8|16"), std::string::npos) << e.what();
  }
  // The default is left out of the canonical spec, so names stored before the option existed still match.
  EXPECT_EQ(makeCompressor("qsgd:rounding_bits=16")->canonicalSpec(), makeCompressor("qsgd")->canonicalSpec());
  EXPECT_EQ(makeCompressor("int8:rotate=none")->canonicalSpec(), "int8:block=256,rounding=nearest");
  EXPECT_EQ(makeCompressor("terngrad:rounding_bits=8")->canonicalSpec(), "terngrad:block=512,rounding_bits=8");
  EXPECT_NE(makeCompressor("int8:rounding=stochastic,rounding_bits=8")->canonicalSpec(),
            makeCompressor("int8:rounding=stochastic")->canonicalSpec());
}

// The wire records the width: flag bit 8. Forged flags are refused by name: 8-bit uniforms on a codec
// that rounds to nearest or draws no uniforms at all, and any bit beside it that no codec defines.
TEST(RoundingBits, WireFlagIsCheckedOnDecode) {
  const auto x = testing::normalVector(300, 8);
  struct Forge {
    const char* spec;
    uint32_t flags;
    const char* message;
  };
  for (const Forge& f : {Forge{"int8", 0x100, "without flag 0x1"}, Forge{"int4", 0x100, "without flag 0x1"},
                         Forge{"int8:rounding=stochastic", 0x201, "unknown format flags 0x201"},
                         Forge{"terngrad", 0x200, "unknown format flags 0x200"},
                         Forge{"qsgd", 0x204, "unknown format flags 0x204"}, Forge{"fp16", 0x100, "flag"},
                         Forge{"fp8-e4m3", 0x100, "flag"}, Forge{"sign", 0x100, "flag"}, Forge{"onebit", 0x100, "flag"},
                         Forge{"mxfp8", 0x100, "flag"}, Forge{"nvfp4", 0x100, "flag"}, Forge{"topk", 0x100, "flag"},
                         Forge{"randomk:unbiased=true", 0x102, "flag"}}) {
    SCOPED_TRACE(f.spec);
    auto c = makeCompressor(f.spec);
    auto wire = testing::encodeToVector(*c, x);
    testing::rewrite(wire, [&](WireHeader& h) { h.flags = f.flags; });
    testing::expectRejected(*c, wire, x.size(), f.message);
  }
  for (const char* spec : {"int8:rounding=stochastic,rounding_bits=8", "qsgd:rounding_bits=8", "terngrad:rounding_bits=8",
                           "int4:rounding=stochastic,rounding_bits=8"}) {
    auto c = makeCompressor(spec);
    EXPECT_EQ(parseHeader(testing::encodeToVector(*c, x)).flags & 0x100u, 0x100u) << spec;
  }
}

TEST(Int8Nearest, IsDeterministicAndSymmetric) {
  auto c = makeCompressor("int8:block=4");
  const std::vector<float> x = {-1.0f, 1.0f, 0.0f, 0.5f};
  const auto d = testing::decodeToVector(*c, testing::encodeToVector(*c, x), x.size());
  EXPECT_EQ(d[0], -1.0f);
  EXPECT_EQ(d[1], 1.0f);
  EXPECT_EQ(d[2], 0.0f);  // zeros stay zeros
  EXPECT_NEAR(d[3], 0.5f, 0.5f / 127);
}

}  // namespace
}  // namespace gradcomp
