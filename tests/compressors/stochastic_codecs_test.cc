// Stochastic codecs are unbiased: the mean of decode(encode(x)) over many independent steps converges
// to x. Bound: |mean - x| <= 5 standard errors (per-step spread is at most one quantization step), a
// false failure rate below 1e-6 per element checked.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/scalar/philox.h"

#include "compressors/registry.h"
#include "tests/compressors/codec_test_util.h"

namespace gradcomp {
namespace {

class Unbiased : public ::testing::TestWithParam<std::string> {};

TEST_P(Unbiased, MeanOfDecodesConvergesToInput) {
  auto c = makeCompressor(GetParam());
  const size_t n = 64;
  // Kept away from 0 (|x| >= 0.5): an element whose chance of rounding up is below 1/4000 may see no hit
  // at all in 4000 trials, and then its sample spread (0) says nothing; the exact test below covers the
  // rounding of any value.
  auto x = testing::normalVector(n, 21);
  for (float& v : x) v += std::copysign(0.5f, v);
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
    EXPECT_LE(std::fabs(mean - x[i]), 5 * se + 1e-5) << GetParam() << " element " << i << " x=" << x[i];
  }
}

INSTANTIATE_TEST_SUITE_P(StochasticCodecs, Unbiased,
                         ::testing::Values("int8:rounding=stochastic,block=64", "qsgd:bits=2,block=64", "qsgd:bits=4",
                                           "terngrad:block=64", "randomk:ratio=0.25,unbiased=true"),
                         [](const auto& p) {
                           std::string s = p.param;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// The uniforms of stochastic rounding have kRoundingBits random bits (kernels/scalar/philox.h): over all
// 2^kRoundingBits equally likely draws, floor(v + u) averages to v within 2^-(kRoundingBits + 1), and
// P(u < r) (terngrad's keep test) is r within the same bound. Exact: every draw is enumerated.
TEST(RoundingUniforms, BiasIsWithinHalfAGridStepForEveryFraction) {
  constexpr uint32_t kDraws = 1u << scalar::kRoundingBits;
  const double bound = std::ldexp(1.0, -(scalar::kRoundingBits + 1));
  std::vector<float> grid(kDraws);
  for (uint32_t k = 0; k < kDraws; ++k) grid[k] = (static_cast<float>(k) + 0.5f) / static_cast<float>(kDraws);
  double worstRound = 0, worstKeep = 0;
  for (float v : {0.0f, 1e-6f, 0.3f, 0.5f, 0.999f, 2.25f, 17.73f, 126.6f, -0.3f, -126.999f, 0x1p-17f, 0.5f + 0x1p-17f}) {
    double sum = 0;
    for (float u : grid) sum += std::floor(v + u);
    worstRound = std::max(worstRound, std::fabs(sum / kDraws - v));
    if (v >= 0 && v <= 1) {
      uint64_t kept = 0;
      for (float u : grid) kept += u < v;
      worstKeep = std::max(worstKeep, std::fabs(double(kept) / kDraws - v));
    }
  }
  EXPECT_LE(worstRound, bound + 1e-12);
  EXPECT_LE(worstKeep, bound + 1e-12);
  EXPECT_GT(worstRound, 0.0);  // the bound is not vacuous: with finitely many draws there is some bias
  // And the stream's uniforms are on that grid, in (0, 1).
  const auto s = scalar::RngStream::make(5, 1, 2, 3);
  for (uint64_t i = 0; i < 4096; ++i) {
    const float u = scalar::roundingUniform(s, i);
    ASSERT_TRUE(u > 0.0f && u < 1.0f);
    const float k = u * static_cast<float>(kDraws) - 0.5f;
    ASSERT_EQ(k, std::floor(k));
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
