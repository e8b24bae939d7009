// The cast kernels on every vector path this CPU runs (kernels/cpu/cpu_path.h) against the scalar
// reference, bit for bit: codes, saturation counts, the fused largest-|bits| of the input, decodes
// (overwrite and accumulate) and the Inf/NaN code search, at every length 0..100 (all the tails of 8-
// and 16-lane loops) and a long one, with values that saturate, round to the edges, and are non-finite.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cast_kernels.h"
#include "kernels/cpu/cpu_path.h"
#include "tests/kernels/cpu_path_params.h"

namespace gradcomp::cpu {
namespace {

std::vector<float> inputs(size_t n, uint64_t seed, bool nonFinite) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  // Saturation edges, subnormals, and exact round-to-nearest-even ties (random normals almost never land
  // on one): bf16 ties 1 + 2^-8 (even below: down) and -(1 + 3 x 2^-8) (odd below: up), fp16 ties
  // 1 + 2^-11 (down) and 1 + 3 x 2^-11 (up).
  const float specials[] = {65504.0f, 65519.0f, 65520.0f, -70000.0f, 3.3e38f, -3.39e38f, 1e-40f, -0.0f, 6e-8f,
                            1.00390625f, -1.01171875f, 1.00048828125f, 1.00146484375f};
  constexpr size_t kSpecials = sizeof specials / sizeof specials[0];
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = rng() % 8;
    x[i] = r == 0 ? specials[rng() % kSpecials] : r == 1 ? normal(rng) * 1e5f : normal(rng);
  }
  if (nonFinite && n > 0) {
    x[n / 2] = std::numeric_limits<float>::infinity();
    x[n - 1] = std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

struct Encoded {
  std::vector<uint16_t> codes;
  uint64_t saturated = 0;
  uint32_t largest = 0;
  std::vector<uint32_t> decoded, accumulated, checkedDecoded;  // bits
  size_t firstBad = 0, checkedFirstBad = 0;
};

template <typename T>
std::vector<uint32_t> bitsOf(const std::vector<T>& v) {
  std::vector<uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));  // n = 0: no null-pointer memcpy
  return b;
}

Encoded run(CpuPath path, bool fp16, const std::vector<float>& x, float prescale, bool stream) {
  setCpuPath(path);
  Encoded e;
  // A 64-byte-aligned output, so the streamed stores are taken where a path streams.
  std::vector<uint16_t> buffer(x.size() + 32);
  uint16_t* out = buffer.data();
  while (reinterpret_cast<uintptr_t>(out) % 64) ++out;
  e.saturated = fp16 ? encodeFp16(x.data(), x.size(), prescale, out, stream, &e.largest)
                     : encodeBf16(x.data(), x.size(), out, stream, &e.largest);
  fenceStreamedStores();
  e.codes.assign(out, out + x.size());
  // The streamed overwrite decode writes at an offset of 3 floats (a masked head up to 64 bytes first).
  std::vector<float> y(x.size()), acc(x.size(), 0.25f), streamedBuffer(x.size() + 3);
  float* streamed = streamedBuffer.data() + 3;
  // The checked decode writes at an offset of 5 floats: another alignment of its head.
  std::vector<float> checkedBuffer(x.size() + 5);
  float* checked = checkedBuffer.data() + 5;
  if (fp16) {
    decodeFp16(e.codes.data(), x.size(), 1.0f / prescale, streamed, false, stream);
    decodeFp16(e.codes.data(), x.size(), 1.0f / prescale, acc.data(), true);
    e.firstBad = firstNonFiniteFp16(e.codes.data(), x.size());
    e.checkedFirstBad = decodeFp16Checked(e.codes.data(), x.size(), 1.0f / prescale, checked, stream);
  } else {
    decodeBf16(e.codes.data(), x.size(), streamed, false, stream);
    decodeBf16(e.codes.data(), x.size(), acc.data(), true);
    e.firstBad = firstNonFiniteBf16(e.codes.data(), x.size());
    e.checkedFirstBad = decodeBf16Checked(e.codes.data(), x.size(), checked, stream);
  }
  fenceStreamedStores();
  e.checkedDecoded = bitsOf(std::vector<float>(checked, checked + x.size()));
  std::copy(streamed, streamed + x.size(), y.begin());
  e.decoded = bitsOf(y);
  e.accumulated = bitsOf(acc);
  return e;
}

class CastKernelPaths : public CpuPathTest {};

TEST_P(CastKernelPaths, EveryLengthGivesTheScalarBytes) {
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 100; ++n) lengths.push_back(n);
  lengths.push_back(4099);
  size_t compared = 0;
  for (const size_t n : lengths)
    for (const bool nonFinite : n > 0 ? std::vector<bool>{false, true} : std::vector<bool>{false})
      for (const bool fp16 : {true, false})
        for (const float prescale : fp16 ? std::vector<float>{1.0f, 0.125f} : std::vector<float>{1.0f})
          for (const bool stream : {false, true}) {
            SCOPED_TRACE(::testing::Message() << (fp16 ? "fp16" : "bf16") << " n=" << n << " prescale=" << prescale
                                              << " nonFinite=" << nonFinite << " stream=" << stream);
            const auto x = inputs(n, n * 7 + nonFinite, nonFinite);
            const Encoded want = run(CpuPath::Scalar, fp16, x, prescale, stream);
            const Encoded got = run(GetParam(), fp16, x, prescale, stream);
            ASSERT_EQ(got.largest, want.largest);
            if (!nonFinite) {  // a non-finite input fails the encode: its codes are unspecified
              ASSERT_EQ(got.codes, want.codes);
              ASSERT_EQ(got.saturated, want.saturated);
              ASSERT_EQ(got.decoded, want.decoded);
              ASSERT_EQ(got.accumulated, want.accumulated);
              ASSERT_EQ(got.firstBad, want.firstBad);
              ASSERT_EQ(got.checkedFirstBad, want.firstBad);
              if (got.checkedFirstBad == n) {
                ASSERT_EQ(got.checkedDecoded, want.decoded);
              }
            } else {
              ASSERT_GE(got.largest, 0x7f800000u);
            }
            ++compared;
          }
  std::printf("cast kernels: %zu cases on the %s path equal the scalar reference\n", compared,
              cpuPathName(GetParam()));
}

// Error feedback's fused encoders: the scalar path's codes and saturations, and residual = x - the
// decoder's value of each code, bit for bit (the saturating values, the ties, subnormals and -0 included).
TEST_P(CastKernelPaths, ResidualEncodersGiveTheCodesAndXMinusTheDecodedValues) {
  size_t compared = 0;
  for (const size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{17}, size_t{100}, size_t{4099}})
    for (const bool fp16 : {true, false})
      for (const float prescale : fp16 ? std::vector<float>{1.0f, 0.125f} : std::vector<float>{1.0f}) {
        SCOPED_TRACE(::testing::Message() << (fp16 ? "fp16" : "bf16") << " n=" << n << " prescale=" << prescale);
        const auto x = inputs(n, n * 13 + 1, false);
        const Encoded want = run(CpuPath::Scalar, fp16, x, prescale, false);
        setCpuPath(GetParam());
        std::vector<uint16_t> codes(n + 1, 0xeeee);
        std::vector<float> residual(n + 1, -1.0f);
        const uint64_t saturated =
            fp16 ? encodeFp16WithResidual(x.data(), n, prescale, 1.0f / prescale, codes.data(), residual.data())
                 : encodeBf16WithResidual(x.data(), n, codes.data(), residual.data());
        ASSERT_EQ(std::vector<uint16_t>(codes.begin(), codes.begin() + static_cast<std::ptrdiff_t>(n)), want.codes);
        ASSERT_EQ(codes[n], 0xeeee);
        ASSERT_EQ(saturated, want.saturated);
        for (size_t i = 0; i < n; ++i) {
          float decoded;
          std::memcpy(&decoded, &want.decoded[i], sizeof decoded);
          const float expected = x[i] - decoded;
          uint32_t gotBits, wantBits;
          std::memcpy(&gotBits, &residual[i], sizeof gotBits);
          std::memcpy(&wantBits, &expected, sizeof wantBits);
          ASSERT_EQ(gotBits, wantBits) << i;
        }
        ASSERT_EQ(residual[n], -1.0f);
        compared += n;
      }
  std::printf("cast residual encoders: %zu values on the %s path equal x - decoded\n", compared, cpuPathName(GetParam()));
}

TEST_P(CastKernelPaths, TheInfNanCodeSearchFindsTheFirstOne) {
  setCpuPath(GetParam());
  for (const size_t n : {size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{1000}}) {
    std::vector<uint16_t> codes(n, 0x3c00);  // 1.0 in fp16
    EXPECT_EQ(firstNonFiniteFp16(codes.data(), n), n);
    std::vector<float> out(n);
    EXPECT_EQ(decodeFp16Checked(codes.data(), n, 1.0f, out.data()), n);
    EXPECT_EQ(out[n - 1], 1.0f);
    codes[n - 1] = 0xfc00;  // -Inf
    EXPECT_EQ(firstNonFiniteFp16(codes.data(), n), n - 1);
    EXPECT_EQ(decodeFp16Checked(codes.data(), n, 1.0f, out.data()), n - 1);  // the fused check finds it too
    codes[n / 3] = 0x7f81;  // a bf16 NaN, also an fp16 NaN
    EXPECT_EQ(firstNonFiniteBf16(codes.data(), n), n / 3);
    EXPECT_EQ(firstNonFiniteFp16(codes.data(), n), n / 3);
    EXPECT_EQ(decodeBf16Checked(codes.data(), n, out.data()), n / 3);
    EXPECT_EQ(decodeFp16Checked(codes.data(), n, 1.0f, out.data(), true), n / 3);
  }
}

INSTANTIATE_TEST_SUITE_P(CpuPaths, CastKernelPaths, ::testing::Values(CpuPath::Avx512, CpuPath::Avx2), cpuPathTestName);

TEST(CpuPath, TheChoiceIsNamedAndCannotExceedTheCpu) {
  EXPECT_EQ(parseCpuPath("avx2"), CpuPath::Avx2);
  EXPECT_STREQ(cpuPathName(CpuPath::Avx512), "avx512");
  EXPECT_THROW(parseCpuPath("sse9"), InvalidArgument);
  EXPECT_LE(activeCpuPath(), supportedCpuPath());
  if (supportedCpuPath() < CpuPath::Avx512) {
    EXPECT_THROW(setCpuPath(CpuPath::Avx512), InvalidArgument);
  }
  std::printf("CPU path: %s supported, %s active\n", cpuPathName(supportedCpuPath()), cpuPathName(activeCpuPath()));
}

}  // namespace
}  // namespace gradcomp::cpu
