// Stochastic codecs are unbiased: the mean of decode(encode(x)) over many independent steps converges
// to x. Bound: |mean - x| <= 5 standard errors (per-step spread is at most one quantization step), a
// false failure rate below 1e-6 per element checked.
#include <gtest/gtest.h>

#include <cmath>

#include "compressors/registry.h"
#include "tests/compressors/codec_test_util.h"

namespace gradcomp {
namespace {

class Unbiased : public ::testing::TestWithParam<std::string> {};

TEST_P(Unbiased, MeanOfDecodesConvergesToInput) {
  auto c = makeCompressor(GetParam());
  const size_t n = 64;
  const auto x = testing::normalVector(n, 21);
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
