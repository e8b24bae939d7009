// The decodability rules of kernels/scalar/scale_limits.h: the exact bounds they imply, that a value one
// ulp past each bound really overflows the decoder's arithmetic (so the rule is not stricter than it must
// be), and the encoder-side factors (block scales, qsgd norms, random-k clamps) at the edges of fp32.
#include "kernels/scalar/scale_limits.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "kernels/scalar/level_codes.h"

namespace gradcomp {
namespace {

using namespace scalar;

TEST(ScaleLimits, SmallestDecodableScalesAreTheStatedBounds) {
  struct Case {
    float maxCode, bound;
  };
  for (const Case c : {Case{127.0f, 3.73219501e-37f}, Case{448.0f, 1.31655376e-36f}, Case{57344.0f, 1.68518882e-34f},
                       Case{65504.0f, 1.92498978e-34f}}) {
    SCOPED_TRACE(c.maxCode);
    EXPECT_EQ(smallestDecodableScale(c.maxCode), c.bound);
    EXPECT_TRUE(reciprocalScaleDecodes(c.bound, c.maxCode));
    // One ulp below, the decoder's own product overflows: the rule is exact, not conservative.
    const float below = nextDown(c.bound);
    EXPECT_FALSE(reciprocalScaleDecodes(below, c.maxCode));
    EXPECT_TRUE(std::isinf(c.maxCode * (1.0f / below)));
  }
  // The scales of the review: 1e-40 (an int8 scale with one exponent bit flipped), 0, Inf, NaN, negative.
  for (float bad : {1e-40f, 0.0f, INFINITY, NAN, -1.0f, 1e-45f}) EXPECT_FALSE(reciprocalScaleDecodes(bad, 127.0f)) << bad;
  EXPECT_TRUE(reciprocalScaleDecodes(FLT_MAX, 127.0f));
}

TEST(ScaleLimits, BlockScalesFollowTransformerEngineAndAlwaysDecode) {
  EXPECT_EQ(blockScaleFor(0.0f, 127.0f), 1.0f);
  EXPECT_EQ(blockScaleFor(NAN, 127.0f), 1.0f);
  EXPECT_EQ(blockScaleFor(1e-44f, 448.0f), FLT_MAX);
  EXPECT_EQ(blockScaleFor(2.0f, 448.0f), 224.0f);
  // amax = FLT_MAX: 127 / FLT_MAX rounds to a scale whose reciprocal times 127 is Inf (the review's
  // "int8 block at FLT_MAX decodes to inf"); the encoder takes the next float up.
  const float raw = 127.0f / FLT_MAX;
  EXPECT_FALSE(reciprocalScaleDecodes(raw, 127.0f));
  EXPECT_EQ(blockScaleFor(FLT_MAX, 127.0f), nextUp(raw));
  for (float maxCode : {127.0f, 448.0f, 57344.0f})
    for (float amax : {FLT_MAX, nextDown(FLT_MAX), 3e38f, 1e38f, 1.0f, 1e-30f, 1e-38f, 1e-41f, 1e-45f})
      EXPECT_TRUE(reciprocalScaleDecodes(blockScaleFor(amax, maxCode), maxCode)) << maxCode << " " << amax;
}

TEST(ScaleLimits, QsgdNormsAreCappedToWhatTheirLevelsDecode) {
  for (int bits = 2; bits <= 8; ++bits) {
    const int s = qsgdLevels(bits);
    SCOPED_TRACE(s);
    const float largest = largestDecodableQsgdNorm(s);
    EXPECT_TRUE(qsgdNormDecodes(largest, s));
    if (largest < FLT_MAX) {
      EXPECT_FALSE(qsgdNormDecodes(nextUp(largest), s));
      EXPECT_TRUE(std::isinf(static_cast<float>(s) * (nextUp(largest) / static_cast<float>(s))));
    }
    // Two values of 2.41e38 in one bucket: the L2 norm is beyond FLT_MAX; the wire norm is the cap.
    const double sumSquares = 2.0 * 2.41e38 * 2.41e38;
    EXPECT_EQ(qsgdWireNorm(sumSquares, s), largest);
    EXPECT_EQ(qsgdWireNorm(4.0, s), 2.0f);
    EXPECT_EQ(qsgdWireNorm(0.0, s), 0.0f);
  }
  EXPECT_EQ(largestDecodableQsgdNorm(7), FLT_MAX);
  EXPECT_EQ(largestDecodableQsgdNorm(127), nextDown(FLT_MAX));
  EXPECT_FALSE(qsgdNormDecodes(INFINITY, 7));
  EXPECT_FALSE(qsgdNormDecodes(-1.0f, 7));
  EXPECT_TRUE(qsgdNormDecodes(0.0f, 7));
}

TEST(ScaleLimits, RatiosStayExactOutsideTheNormalRangeOfTheirDivisor) {
  // In 2^-100 .. 2^100 the ratio is the plain fl(|c| * fl(s / v)): no byte of the usual encodings moves.
  const RatioScaling usual = ratioScaling(7.0f, 3.0f);
  EXPECT_EQ(usual.pre, 1.0f);
  EXPECT_EQ(usual.inv, 7.0f / 3.0f);
  EXPECT_EQ(scaledRatio(1.5f, usual), 1.5f * (7.0f / 3.0f));
  // A subnormal norm: s / v overflows, so without the normalizer every nonzero |c| would map to Inf and
  // every zero to NaN (0 x Inf), the review's "zeros decode to the top level".
  for (float v : {1e-39f, 1e-42f, 1.4e-45f, 2e-38f, 1e-33f, 1e33f, 3e38f, FLT_MAX}) {
    SCOPED_TRACE(v);
    const RatioScaling r = ratioScaling(7.0f, v);
    EXPECT_NE(r.pre, 1.0f);
    EXPECT_TRUE(std::isnormal(r.pre) && std::isnormal(r.inv));
    EXPECT_EQ(scaledRatio(0.0f, r), 0.0f);
    EXPECT_FLOAT_EQ(scaledRatio(v, r), 7.0f);          // |c| = v: the top level
    if (v > 1e-44f) {
      EXPECT_NEAR(scaledRatio(v / 2.0f, r), 3.5f, 0.01f);
    }
  }
  EXPECT_EQ(ratioScaling(7.0f, 0.0f).inv, 0.0f);
  // The normalizer of a subnormal reads its exponent after an exact scaling by 2^64.
  EXPECT_EQ(powerOfTwoNormalizer(1.0f), 1.0f);
  EXPECT_EQ(powerOfTwoNormalizer(0x1p-140f), 0x1p126f);
  EXPECT_EQ(powerOfTwoNormalizer(0x1p-110f), 0x1p110f);
  EXPECT_EQ(powerOfTwoNormalizer(0x1p120f), 0x1p-120f);
  EXPECT_EQ(powerOfTwoNormalizer(FLT_MAX), 0x1p-126f);
}

TEST(ScaleLimits, QsgdCodesOfTinyAndHugeBlocksAreTheirLevels) {
  // |c| = norm / 2 with u = 0.25 and s = 7: 3.5 + 0.25 -> level 3, at every magnitude.
  for (float norm : {1e-39f, 1e-30f, 1.0f, 1e30f, 3e38f}) {
    SCOPED_TRACE(norm);
    EXPECT_EQ(qsgdCode(norm / 2.0f, norm, 4, 0.25f), 3u);
    EXPECT_EQ(qsgdCode(-norm / 2.0f, norm, 4, 0.25f), 8u | 3u);
    EXPECT_EQ(qsgdCode(0.0f, norm, 4, 0.99f), 0u);
    EXPECT_EQ(qsgdCode(norm, norm, 4, 0.99f), 7u);
    EXPECT_EQ(ternCode(norm / 2.0f, norm, 0.49f), 1u);
    EXPECT_EQ(ternCode(norm / 2.0f, norm, 0.51f), 0u);
    EXPECT_EQ(ternCode(0.0f, norm, 0.0f), 0u);
  }
}

TEST(ScaleLimits, RandomKClampsOnlyWhatTheUnbiasedScaleWouldOverflow) {
  EXPECT_EQ(largestScaledValue(1.0f), FLT_MAX);
  const float limit = largestScaledValue(100.0f);
  EXPECT_TRUE(scaledValueDecodes(limit, 100.0f));
  EXPECT_FALSE(scaledValueDecodes(nextUp(limit), 100.0f));
  EXPECT_EQ(clampMagnitude(3e38f, limit), limit);
  EXPECT_EQ(clampMagnitude(-3e38f, limit), -limit);
  EXPECT_EQ(clampMagnitude(1.5f, limit), 1.5f);
}

TEST(ScaleLimits, ScaleRulesAcceptExactlyTheDecodableFactors) {
  const ScaleRule int8{.reciprocalOf = 127.0f};
  EXPECT_TRUE(scaleAccepted(1.0f, int8));
  EXPECT_FALSE(scaleAccepted(0.0f, int8));
  EXPECT_FALSE(scaleAccepted(1e-40f, int8));
  const ScaleRule qsgd{.allowZero = true, .qsgdLevels = 127};
  EXPECT_TRUE(scaleAccepted(0.0f, qsgd));
  EXPECT_TRUE(scaleAccepted(nextDown(FLT_MAX), qsgd));
  EXPECT_FALSE(scaleAccepted(FLT_MAX, qsgd));
  const ScaleRule sign{.allowZero = true};
  EXPECT_TRUE(scaleAccepted(FLT_MAX, sign));
  EXPECT_FALSE(scaleAccepted(-0.5f, sign));
  EXPECT_FALSE(scaleAccepted(NAN, sign));
}

}  // namespace
}  // namespace gradcomp
