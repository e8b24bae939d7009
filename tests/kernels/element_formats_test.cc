// The shared scalar element formats of the MX / NVFP4 codecs (kernels/scalar/element_formats.h) against
// their definitions: every code's value by ldexp, RNE to the nearest code found by brute force on random
// and boundary inputs, the FP8 elements bit for bit equal to the FP8 codec's conversions, the E8M0 rule.
// (tests/python/test_element_formats.py checks the same formats against ml_dtypes.)
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/scalar/element_formats.h"

namespace gradcomp::scalar {
namespace {

struct Format {
  ElementFormat fmt;
  int expBits, mantBits, bias;
};
const Format kFormats[] = {{ElementFormat::E4M3, 4, 3, 7},
                           {ElementFormat::E5M2, 5, 2, 15},
                           {ElementFormat::E2M3, 2, 3, 1},
                           {ElementFormat::E3M2, 3, 2, 3},
                           {ElementFormat::E2M1, 2, 1, 1}};

double definition(uint32_t code, const Format& f) {
  const uint32_t sign = code >> (f.expBits + f.mantBits);
  const uint32_t e = (code >> f.mantBits) & ((1u << f.expBits) - 1u);
  const uint32_t m = code & ((1u << f.mantBits) - 1u);
  const double mag = e == 0 ? std::ldexp(static_cast<double>(m), 1 - f.bias - f.mantBits)
                            : std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.mantBits), static_cast<int>(e) - f.bias);
  return sign ? -mag : mag;
}

class ElementFormats : public ::testing::TestWithParam<Format> {};

TEST_P(ElementFormats, EveryCodeDecodesToItsDefinitionAndRoundTrips) {
  const Format f = GetParam();
  const ElementSpec s = elementSpec(f.fmt);
  ASSERT_EQ(s.bits, 1 + f.expBits + f.mantBits);
  double largest = 0;
  for (uint32_t c = 0; c < (1u << s.bits); ++c) {
    const auto code = static_cast<uint8_t>(c);
    if (!elementIsFinite(code, f.fmt)) continue;
    const float v = elementToFloat(code, s, f.fmt);
    EXPECT_EQ(static_cast<double>(v), definition(c, f)) << c;
    EXPECT_EQ(floatToElement(v, s), code) << c;  // -0 keeps its sign bit
    largest = std::max(largest, std::fabs(static_cast<double>(v)));
  }
  EXPECT_EQ(largest, s.maxValue);
  EXPECT_EQ(static_cast<double>(elementToFloat(s.maxCode, s, f.fmt)), largest);
  EXPECT_EQ(std::ldexp(1.0, s.emax), std::exp2(std::floor(std::log2(largest))));
  EXPECT_EQ(bitsToFloat(s.minNormalBits), std::ldexp(1.0f, 1 - f.bias));
}

TEST_P(ElementFormats, RoundsToTheNearestCodeTiesToEvenAndSaturates) {
  const Format f = GetParam();
  const ElementSpec s = elementSpec(f.fmt);
  std::vector<uint32_t> codes;
  for (uint32_t c = 0; c < (1u << (s.bits - 1)); ++c)
    if (elementIsFinite(static_cast<uint8_t>(c), f.fmt)) codes.push_back(c);
  std::mt19937 rng(static_cast<unsigned>(f.fmt) + 1);
  std::vector<float> probes;
  for (int i = 0; i < 20000; ++i)
    probes.push_back(std::ldexp(std::uniform_real_distribution<float>(0.5f, 1.0f)(rng), static_cast<int>(rng() % 40) - 20));
  for (size_t i = 0; i + 1 < codes.size(); ++i) {  // each midpoint and its neighbours
    const float mid = static_cast<float>((definition(codes[i], f) + definition(codes[i + 1], f)) / 2);
    probes.insert(probes.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)});
  }
  const uint32_t overflow = elementOverflowBits(s);
  for (float x : probes) {
    uint32_t best = 0;
    double bestErr = INFINITY;
    for (uint32_t c : codes) {
      const double err = std::fabs(definition(c, f) - x);
      if (err < bestErr || (err == bestErr && (c & 1u) == 0)) best = c, bestErr = err;
    }
    if (x > s.maxValue) best = s.maxCode;  // saturating
    EXPECT_EQ(floatToElement(x, s), best) << x;
    EXPECT_EQ(floatToElement(-x, s), best | (1u << (s.bits - 1))) << -x;
    // Counted as a saturation exactly when RNE would have passed the largest value.
    const double next = s.maxValue + std::ldexp(1.0, s.emax - f.mantBits);
    EXPECT_EQ(floatBits(x) >= overflow, x >= (s.maxValue + next) / 2) << x;
  }
  EXPECT_EQ(floatToElement(FLT_MAX, s), s.maxCode);
  EXPECT_EQ(floatToElement(INFINITY, s), s.maxCode);
}

INSTANTIATE_TEST_SUITE_P(Scalar, ElementFormats, ::testing::ValuesIn(kFormats),
                         [](const auto& p) { return std::string(elementFormatName(p.param.fmt)); });

TEST(ElementFormats, Fp8ElementsAreTheFp8CodecsConversion) {
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) {
    const float x = bitsToFloat(static_cast<uint32_t>(rng()) & 0xff7fffffu);  // any finite pattern
    EXPECT_EQ(floatToElement(x, elementSpec(ElementFormat::E4M3)), floatToFp8(x, Fp8Format::E4M3)) << x;
    EXPECT_EQ(floatToElement(x, elementSpec(ElementFormat::E5M2)), floatToFp8(x, Fp8Format::E5M2)) << x;
  }
}

TEST(ElementFormats, E8M0SharedScaleFollowsTheMxRule) {
  const ElementSpec e4m3 = elementSpec(ElementFormat::E4M3);
  EXPECT_EQ(mxSharedScaleCode(448.0f, e4m3), 127);       // 2^(8 - 8)
  EXPECT_EQ(mxSharedScaleCode(511.99f, e4m3), 127);
  EXPECT_EQ(mxSharedScaleCode(512.0f, e4m3), 128);
  EXPECT_EQ(mxSharedScaleCode(1.0f, e4m3), 119);
  EXPECT_EQ(mxSharedScaleCode(FLT_MAX, e4m3), 127 + 127 - 8);
  EXPECT_EQ(mxSharedScaleCode(1e-30f, e4m3), 127 - 100 - 8);  // 1e-30 = 1.27 x 2^-100
  EXPECT_EQ(mxSharedScaleCode(1e-38f, e4m3), 0);              // 2^(-127 - 8): clamped at 2^-127
  EXPECT_EQ(mxSharedScaleCode(0.0f, e4m3), 0);
  EXPECT_EQ(floorLog2(1.4e-45f), -149);
  EXPECT_EQ(floorLog2(std::ldexp(1.5f, -130)), -130);
  for (int code = 0; code < 255; ++code) {
    EXPECT_EQ(static_cast<double>(e8m0ToFloat(static_cast<uint8_t>(code))), std::ldexp(1.0, code - 127));
    if (code <= 254 - e4m3.emax && code >= 1) {
      EXPECT_EQ(static_cast<double>(mxInverseScale(static_cast<uint8_t>(code))), std::ldexp(1.0, 127 - code));
    }
    EXPECT_EQ(mxScaleCodeDecodes(static_cast<uint8_t>(code), e4m3), code <= 254 - 8) << code;
  }
  EXPECT_FALSE(mxScaleCodeDecodes(kE8M0Nan, e4m3));
}

TEST(ElementFormats, Nvfp4TensorScaleAlwaysDecodes) {
  EXPECT_EQ(nvfp4TensorScale(2688.0f), 1.0f);
  EXPECT_EQ(nvfp4TensorScale(0.0f), 0x1p-126f);
  EXPECT_EQ(nvfp4TensorScale(1e-40f), 0x1p-126f);
  for (float amax : {FLT_MAX, std::nextafter(FLT_MAX, 0.0f), 3e38f, 1.0f, 1e-30f})
    EXPECT_TRUE(nvfp4TensorScaleDecodes(nvfp4TensorScale(amax))) << amax;
  EXPECT_FALSE(nvfp4TensorScaleDecodes(FLT_MAX / 2000.0f));
  EXPECT_FALSE(nvfp4TensorScaleDecodes(1e-39f));  // subnormal
  EXPECT_EQ(nvfp4BlockScaleCode(6.0f * 448.0f, 1.0f), 0x7e);  // the largest E4M3 scale
  EXPECT_EQ(nvfp4BlockScaleCode(1e9f, 1.0f), 0x7e);            // saturates
  EXPECT_TRUE(nvfp4ScaleCodeValid(0x7e));
  EXPECT_FALSE(nvfp4ScaleCodeValid(0x7f));
  EXPECT_FALSE(nvfp4ScaleCodeValid(0x80));
}

}  // namespace
}  // namespace gradcomp::scalar
