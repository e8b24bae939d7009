// Exhaustive checks of the scalar conversions against independent references: every fp16 / bf16
// pattern, every fp8 code of both flavours, and the rounding boundaries between them.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/block_scale_kernels.h"
#include "kernels/cpu/cast_kernels.h"
#include "kernels/scalar/float_formats.h"

namespace gradcomp::scalar {
namespace {


// Reference decode of a minifloat with the given layout, by the definition (ldexp), no bit tricks.
double minifloatValue(uint32_t code, int expBits, int mantBits, int bias) {
  const uint32_t sign = code >> (expBits + mantBits);
  const uint32_t e = (code >> mantBits) & ((1u << expBits) - 1u);
  const uint32_t m = code & ((1u << mantBits) - 1u);
  const double mag = e == 0 ? std::ldexp(static_cast<double>(m), 1 - bias - mantBits)
                            : std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -mantBits), static_cast<int>(e) - bias);
  return sign ? -mag : mag;
}

// Reference rounding: nearest finite value among `codes`, ties to the even code, saturating at max.
template <typename Decode>
uint32_t nearestCode(double x, const std::vector<uint32_t>& codes, Decode value) {
  uint32_t best = 0;
  double bestErr = INFINITY;
  for (uint32_t c : codes) {
    const double err = std::fabs(value(c) - x);
    if (err < bestErr || (err == bestErr && (c & 1u) == 0 && (best & 1u) == 1)) {
      best = c;
      bestErr = err;
    }
  }
  return best;
}

TEST(Fp16, EveryPatternDecodesToItsDefinitionAndRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = halfBitsToFloat(static_cast<uint16_t>(h));
    if (!halfIsFinite(static_cast<uint16_t>(h))) {
      EXPECT_FALSE(std::isfinite(f)) << h;
      EXPECT_EQ(((h & 0x3ffu) != 0), std::isnan(f)) << h;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), minifloatValue(h, 5, 10, 15)) << h;
    EXPECT_EQ(floatToHalfBits(f), h) << h;  // exact values round to themselves (signed zeros too)
  }
}

// _Float16 needs compiler support (GCC 12 on x86-64; clang from 15): where it is absent (the clang 14 of the
// sanitizer stage) this reference test is not compiled, rather than passing without checking anything.
#if defined(__FLT16_MAX__)
TEST(Fp16, MatchesCompilerConversionAtEveryMidpointAndBoundary) {
  // _Float16 conversion is IEEE round-to-nearest-even: an independent reference.
  std::vector<float> probes = {0.0f, -0.0f, 65504.0f, 65519.996f, 65520.0f, 1e6f, FLT_MAX, 5.96e-8f, 2.98e-8f,
                               2.9802322e-8f, 2.9802326e-8f, 6.1035156e-5f, 1e-45f};
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // midpoints between consecutive positive halves
    const double a = minifloatValue(h, 5, 10, 15), b = minifloatValue(h + 1, 5, 10, 15);
    const float mid = static_cast<float>((a + b) / 2);
    probes.insert(probes.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), -mid});
  }
  for (float f : probes) {
    const uint16_t got = floatToHalfBits(f);
    if (std::fabs(f) >= 65520.0f) {
      EXPECT_EQ(got & 0x7fffu, kHalfMaxBits) << f;  // saturates instead of Inf
      continue;
    }
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t refBits;
    std::memcpy(&refBits, &ref, 2);
    EXPECT_EQ(got, refBits) << f;
  }
}
#endif  // __FLT16_MAX__

TEST(Fp16, ArrayKernelEqualsScalarAndCountsSaturation) {
  std::mt19937 rng(1);
  std::vector<float> x(10007);
  for (auto& v : x) v = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng), static_cast<int>(rng() % 44) - 26);
  x[5] = 70000.0f;
  x[17] = -1e9f;
  x[1000] = 65519.0f;  // rounds to max, not a saturation
  std::vector<uint16_t> out(x.size());
  const uint64_t sat = cpu::encodeFp16(x.data(), x.size(), 1.0f, out.data());
  uint64_t expectSat = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(out[i], floatToHalfBits(x[i])) << i;
    expectSat += std::fabs(x[i]) >= 65520.0f;
  }
  EXPECT_EQ(sat, expectSat);
  EXPECT_GE(sat, 2u);
}

TEST(Bf16, ArrayKernelEqualsScalarAndCountsSaturation) {
  std::mt19937 rng(2);
  std::vector<float> x(10007);
  for (auto& v : x) v = bitsToFloat(static_cast<uint32_t>(rng()) & 0xff7fffffu);  // any finite pattern
  x[3] = FLT_MAX;
  x[4] = -3.4e38f;
  x[5] = bf16BitsToFloat(kBf16MaxBits);
  std::vector<uint16_t> out(x.size());
  const uint64_t sat = cpu::encodeBf16(x.data(), x.size(), out.data());
  uint64_t expectSat = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(out[i], floatToBf16Bits(x[i])) << i;
    expectSat += bf16Overflows(x[i]);
  }
  EXPECT_EQ(sat, expectSat);
  EXPECT_GE(sat, 2u);
}

TEST(Bf16, EveryPatternRoundTripsAndMidpointsRoundToEven) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16BitsToFloat(static_cast<uint16_t>(b));
    if (!bf16IsFinite(static_cast<uint16_t>(b))) continue;
    EXPECT_EQ(floatToBf16Bits(f), b) << b;
    if ((b & 0x7fffu) < 0x7f7fu) {
      // The fp32 exactly between b and b+1 rounds to the even one of them.
      const float mid = bitsToFloat((b << 16) | 0x8000u);
      EXPECT_EQ(floatToBf16Bits(mid), (b & 1u) ? b + 1 : b) << b;
      EXPECT_EQ(floatToBf16Bits(std::nextafter(mid, INFINITY * ((b & 0x8000u) ? -1 : 1))), b + 1) << b;
      EXPECT_EQ(floatToBf16Bits(std::nextafter(mid, 0.0f)), b) << b;
    }
  }
  EXPECT_EQ(floatToBf16Bits(FLT_MAX), kBf16MaxBits);  // would round to Inf: saturates
  EXPECT_EQ(floatToBf16Bits(-INFINITY), 0x8000u | kBf16MaxBits);
  EXPECT_TRUE(bf16Overflows(FLT_MAX));
  EXPECT_FALSE(bf16Overflows(bf16BitsToFloat(kBf16MaxBits)));
  EXPECT_TRUE(std::isnan(bf16BitsToFloat(floatToBf16Bits(NAN))));
}

struct Fp8Case {
  Fp8Format fmt;
  int expBits, mantBits, bias;
  double maxValue;
};

class Fp8 : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8, AllCodesDecodeToTheOcpDefinition) {
  const Fp8Case c = GetParam();
  for (uint32_t code = 0; code < 256; ++code) {
    const float f = fp8ToFloat(static_cast<uint8_t>(code), c.fmt);
    const uint32_t mag = code & 0x7fu;
    if (c.fmt == Fp8Format::E4M3 && mag == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << code;  // S.1111.111 is NaN; E4M3 has no Inf
      continue;
    }
    if (c.fmt == Fp8Format::E5M2 && mag >= 0x7c) {
      EXPECT_EQ(std::isinf(f), mag == 0x7c) << code;
      EXPECT_EQ(std::isnan(f), mag != 0x7c) << code;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), minifloatValue(code, c.expBits, c.mantBits, c.bias)) << code;
    EXPECT_EQ(floatToFp8(f, c.fmt), code) << code;
  }
  EXPECT_EQ(fp8ToFloat(fp8Spec(c.fmt).maxCode, c.fmt), c.maxValue);
}

TEST_P(Fp8, RoundingMatchesBruteForceNearestEven) {
  const Fp8Case c = GetParam();
  std::vector<uint32_t> finite;
  for (uint32_t code = 0; code < 128; ++code)
    if (fp8IsFinite(static_cast<uint8_t>(code), c.fmt)) finite.push_back(code);
  auto value = [&](uint32_t code) { return minifloatValue(code, c.expBits, c.mantBits, c.bias); };
  std::vector<float> probes = {0.0f, 1e-30f, FLT_MAX, static_cast<float>(c.maxValue) * 1.01f};
  for (size_t i = 0; i + 1 < finite.size(); ++i) {
    const float mid = static_cast<float>((value(finite[i]) + value(finite[i + 1])) / 2);
    probes.insert(probes.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY),
                                 static_cast<float>(value(finite[i]))});
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i)
    probes.push_back(std::ldexp(std::uniform_real_distribution<float>(0.5f, 1.0f)(rng), static_cast<int>(rng() % 40) - 24));
  for (float f : probes) {
    // Saturating: beyond max the answer is max (double cannot rank the codes against FLT_MAX).
    const uint32_t expect = f >= c.maxValue ? fp8Spec(c.fmt).maxCode : nearestCode(f, finite, value);
    EXPECT_EQ(floatToFp8(f, c.fmt), expect) << f;
    EXPECT_EQ(floatToFp8(-f, c.fmt), expect | 0x80u) << -f;
  }
  EXPECT_EQ(floatToFp8(INFINITY, c.fmt), fp8Spec(c.fmt).maxCode);  // SATFINITE
  EXPECT_FALSE(fp8IsFinite(floatToFp8(NAN, c.fmt), c.fmt));
}

TEST_P(Fp8, VectorizedBlockKernelEqualsScalar) {
  const Fp8Case c = GetParam();
  // A block whose amax is the format max has scale exactly 1, so codes must equal floatToFp8(x).
  std::mt19937 rng(3);
  std::vector<float> x(4099);
  for (auto& v : x) v = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng), static_cast<int>(rng() % 28) - 20);
  x[0] = static_cast<float>(c.maxValue);  // every other |x| < 2^8 < max
  std::vector<uint8_t> codes(x.size());
  uint64_t sat = 0;
  EXPECT_EQ(cpu::encodeFp8Block(x.data(), x.size(), c.fmt, codes.data(), sat), 1.0f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(codes[i], floatToFp8(x[i], c.fmt)) << x[i];
  EXPECT_EQ(sat, 0u);
  // The fused variant writes the same codes and exactly x - decodeFp8Block(codes).
  std::vector<uint8_t> codes2(x.size());
  std::vector<float> residual(x.size()), decoded(x.size());
  x[0] = 3.0f * static_cast<float>(c.maxValue);  // a scale other than 1
  const float scale = cpu::encodeFp8BlockResidual(x.data(), x.size(), c.fmt, codes2.data(), sat, residual.data());
  cpu::encodeFp8Block(x.data(), x.size(), c.fmt, codes.data(), sat);
  EXPECT_EQ(codes2, codes);
  cpu::decodeFp8Block(codes.data(), codes.size(), c.fmt, scale, decoded.data(), false);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(floatBits(residual[i]), floatBits(x[i] - decoded[i])) << i;
}

TEST_P(Fp8, VectorizedBlockDecodeEqualsScalarForEveryCode) {
  const Fp8Case c = GetParam();
  std::vector<uint8_t> codes;
  for (uint32_t code = 0; code < 256; ++code)
    if (fp8IsFinite(static_cast<uint8_t>(code), c.fmt)) codes.push_back(static_cast<uint8_t>(code));
  for (float scale : {1.0f, 3.0f, 0.0078125f}) {
    std::vector<float> out(codes.size(), 0.0f), acc(codes.size(), 0.5f);
    cpu::decodeFp8Block(codes.data(), codes.size(), c.fmt, scale, out.data(), false);
    cpu::decodeFp8Block(codes.data(), codes.size(), c.fmt, scale, acc.data(), true);
    for (size_t i = 0; i < codes.size(); ++i) {
      const float expect = fp8ToFloat(codes[i], c.fmt) * (1.0f / scale);
      EXPECT_EQ(floatBits(out[i]), floatBits(expect)) << int(codes[i]);
      EXPECT_EQ(acc[i], 0.5f + expect) << int(codes[i]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ocp, Fp8,
                         ::testing::Values(Fp8Case{Fp8Format::E4M3, 4, 3, 7, 448.0},
                                           Fp8Case{Fp8Format::E5M2, 5, 2, 15, 57344.0}),
                         [](const auto& p) { return p.param.fmt == Fp8Format::E4M3 ? "E4M3" : "E5M2"; });

TEST(BlockScale, FollowsTransformerEngineRules) {
  EXPECT_EQ(cpu::blockScale(0.0f, 448.0f), 1.0f);        // amax 0: neutral
  EXPECT_EQ(cpu::blockScale(INFINITY, 448.0f), 1.0f);    // non-finite amax: neutral
  EXPECT_EQ(cpu::blockScale(NAN, 448.0f), 1.0f);
  EXPECT_EQ(cpu::blockScale(1e-44f, 448.0f), FLT_MAX);   // tiny amax: Inf capped at fp32 max
  EXPECT_EQ(cpu::blockScale(2.0f, 448.0f), 224.0f);
  EXPECT_EQ(cpu::blockScale(3.0f, 448.0f), 448.0f / 3.0f);  // correctly rounded division
}

}  // namespace
}  // namespace gradcomp::scalar
