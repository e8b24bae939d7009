// The keyed randomized Hadamard rotation (kernels/scalar/hadamard_rotation.h, kernels/cpu/hadamard_rotation.h):
// it is H D / sqrt(b) by the definition of H, orthonormal, inverted by rotateInverse, linear (so it
// commutes with summation across ranks), keyed by (seed, step, tensor) and not by rank, and it covers a
// tensor of any length with power-of-two blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/hadamard_rotation.h"

namespace gradcomp::cpu {
namespace {

std::vector<float> normal(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

double norm(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return std::sqrt(s);
}

TEST(HadamardRotation, IsHTimesDOverSqrtBByTheDefinition) {
  const scalar::RotationKey key{7, 3, 2};
  const size_t b = 16;
  const auto x = normal(b, 1);
  std::vector<float> y(b);
  rotateForward(x.data(), y.data(), b, b, key, 1.0f);
  const auto s = scalar::rotationStream(key);
  for (size_t i = 0; i < b; ++i) {
    double want = 0;
    for (size_t j = 0; j < b; ++j) {
      const double h = (std::popcount(i & j) & 1) ? -1.0 : 1.0;  // Sylvester: H_ij = (-1)^popcount(i & j)
      const double d = scalar::rotationSignNegative(s, j) ? -1.0 : 1.0;
      want += h * d * x[j];
    }
    EXPECT_NEAR(y[i], want / 4.0, 1e-6) << i;
  }
}

TEST(HadamardRotation, OrthonormalInvertibleAndLinear) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{256}, size_t{1000}, size_t{4099}}) {
    for (size_t b : {size_t{2}, size_t{32}, size_t{256}, size_t{8192}}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " b " << b);
      const scalar::RotationKey key{11, 5, 9};
      const auto x = normal(n, 2), z = normal(n, 3);
      std::vector<float> y(n), back(n), sum(n), ySum(n), yz(n);
      rotateForward(x.data(), y.data(), n, b, key, 1.0f);
      EXPECT_NEAR(norm(y), norm(x), 1e-5 * norm(x));
      rotateInverse(y.data(), back.data(), n, b, key, 1.0f);
      for (size_t i = 0; i < n; ++i) ASSERT_NEAR(back[i], x[i], 2e-6 * (1 + std::fabs(x[i]))) << i;
      // R(x + z) = R x + R z: ranks may sum rotated vectors and rotate the sum back once.
      for (size_t i = 0; i < n; ++i) sum[i] = x[i] + z[i];
      rotateForward(sum.data(), ySum.data(), n, b, key, 1.0f);
      rotateForward(z.data(), yz.data(), n, b, key, 1.0f);
      for (size_t i = 0; i < n; ++i) ASSERT_NEAR(ySum[i], y[i] + yz[i], 4e-6 * (1 + std::fabs(ySum[i]))) << i;
    }
  }
}

TEST(HadamardRotation, KeyedByStepAndTensorAndInPlaceSafe) {
  const auto x = normal(512, 4);
  std::vector<float> a(512), b(512), c(512), inPlace = x;
  rotateForward(x.data(), a.data(), 512, 256, {1, 0, 0}, 1.0f);
  rotateForward(x.data(), b.data(), 512, 256, {1, 1, 0}, 1.0f);
  rotateForward(x.data(), c.data(), 512, 256, {1, 0, 1}, 1.0f);
  rotateForward(inPlace.data(), inPlace.data(), 512, 256, {1, 0, 0}, 1.0f);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a, inPlace);
}

TEST(HadamardRotation, BlocksCoverAnyLengthWithPowersOfTwo) {
  for (uint64_t n : {uint64_t{1}, uint64_t{9}, uint64_t{1000}, uint64_t{4096}, uint64_t{4097}}) {
    uint64_t next = 0;
    while (next < n) {
      const scalar::RotationBlock blk = scalar::rotationBlockOf(next, n, 256);
      ASSERT_EQ(blk.start, next);
      ASSERT_TRUE(std::has_single_bit(blk.size) && blk.size <= 256 && blk.start + blk.size <= n);
      for (uint64_t i = blk.start; i < blk.start + blk.size; ++i) ASSERT_EQ(scalar::rotationBlockOf(i, n, 256).start, blk.start);
      next += blk.size;
    }
  }
  EXPECT_EQ(scalar::rotationNorm(256), 0.0625f);
  EXPECT_FLOAT_EQ(scalar::rotationNorm(128), 1.0f / std::sqrt(128.0f));
}

// The unnormalized Walsh-Hadamard butterflies stage by stage: a' = a + b, b' = a - b.
void referenceButterflies(float* v, size_t size) {
  for (size_t h = 1; h < size; h <<= 1)
    for (size_t i = 0; i < size; i += 2 * h)
      for (size_t j = i; j < i + h; ++j) {
        const float a = v[j], c = v[j + h];
        v[j] = a + c;
        v[j + h] = a - c;
      }
}

// The definition's operations in the definition's order, one element at a time: each block's x x prescale
// with D's sign, the butterflies stage by stage (a' = a + b, b' = a - b), then x 1/sqrt(size). The kernels
// (whichever vector path this build compiles) must give exactly these bits.
std::vector<float> referenceForward(const std::vector<float>& x, size_t b, const scalar::RotationKey& key,
                                    float prescale) {
  const auto s = scalar::rotationStream(key);
  std::vector<float> y(x.size());
  for (size_t start = 0; start < x.size();) {
    const scalar::RotationBlock blk = scalar::rotationBlockOf(start, x.size(), b);
    float* v = y.data() + blk.start;
    for (size_t j = 0; j < blk.size; ++j) {
      const float p = x[blk.start + j] * prescale;
      v[j] = scalar::rotationSignNegative(s, blk.start + j) ? -p : p;
    }
    referenceButterflies(v, blk.size);
    for (size_t j = 0; j < blk.size; ++j) v[j] *= scalar::rotationNorm(blk.size);
    start = blk.start + blk.size;
  }
  return y;
}

// The inverse by its definition, one element at a time: the butterflies stage by stage on y, then x 1/sqrt(size),
// D's sign, and x postscale saturated to +-FLT_MAX where a finite value's product overflows.
std::vector<float> referenceInverse(const std::vector<float>& y, size_t b, const scalar::RotationKey& key,
                                    float postscale) {
  const auto s = scalar::rotationStream(key);
  std::vector<float> x = y;
  for (size_t start = 0; start < x.size();) {
    const scalar::RotationBlock blk = scalar::rotationBlockOf(start, x.size(), b);
    float* v = x.data() + blk.start;
    referenceButterflies(v, blk.size);
    for (size_t j = 0; j < blk.size; ++j) {
      float u = v[j] * scalar::rotationNorm(blk.size);
      if (scalar::rotationSignNegative(s, blk.start + j)) u = -u;
      const float r = u * postscale;
      v[j] = std::isinf(r) && std::isfinite(u) ? std::copysign(FLT_MAX, u) : r;
    }
    start = blk.start + blk.size;
  }
  return x;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(HadamardRotation, EveryBlockSizeGivesTheDefinitionsBitsAndAChunkRotatesAsInsideTheTensor) {
  const scalar::RotationKey key{5, 8, 13};
  for (size_t b : {size_t{2}, size_t{16}, size_t{32}, size_t{64}, size_t{256}, size_t{1024}, size_t{8192}}) {
    for (size_t n : {b, 3 * b, 3 * b + b / 2 + 7, size_t{40000}}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " b " << b);
      const auto x = normal(n, 21);
      std::vector<float> y(n);
      rotateForward(x.data(), y.data(), n, b, key, 0.5f);
      ASSERT_TRUE(sameBits(y, referenceForward(x, b, key, 0.5f)));
      std::vector<float> inverse(n);
      for (const float postscale : {1.0f, 2.0f}) {  // 2^0 (the usual tensor) and a scaled one
        rotateInverse(y.data(), inverse.data(), n, b, key, postscale);
        ASSERT_TRUE(sameBits(inverse, referenceInverse(y, b, key, postscale)));
      }
      // Large values and a postscale that overflows some of them (the butterflies' sums stay finite): the
      // saturation lane by lane.
      std::vector<float> big(n), bigOut(n);
      for (size_t i = 0; i < n; ++i) big[i] = i % 5 == 1 ? 5e35f * x[i] : x[i];
      rotateInverse(big.data(), bigOut.data(), n, b, key, 0x1p12f);
      const auto bigWant = referenceInverse(big, b, key, 0x1p12f);
      ASSERT_TRUE(std::all_of(bigWant.begin(), bigWant.end(), [](float v) { return std::isfinite(v); }));
      if (b >= 64) {
        ASSERT_TRUE(std::any_of(bigWant.begin(), bigWant.end(), [](float v) { return std::fabs(v) == FLT_MAX; }));
      }
      ASSERT_TRUE(sameBits(bigOut, bigWant));
      // A chunk starting on a block boundary (a middle one of whole blocks, then the rest with the tail).
      if (n >= 2 * b) {
        const size_t first = b, count = n - b;
        std::vector<float> part(count), back(count), whole(n);
        rotateForward(x.data() + first, part.data(), count, b, key, 0.5f, first);
        ASSERT_TRUE(std::equal(part.begin(), part.end(), y.begin() + first));
        rotateForward(x.data() + first, part.data(), b, b, key, 0.5f, first);
        ASSERT_TRUE(std::equal(part.begin(), part.begin() + b, y.begin() + first));
        rotateInverse(y.data(), whole.data(), n, b, key, 2.0f);
        rotateInverse(y.data() + first, back.data(), count, b, key, 2.0f, first);
        ASSERT_TRUE(std::equal(back.begin(), back.end(), whole.begin() + first));
      }
    }
  }
}

// rotateForward's inputMaxBits is the largest |x| of the run as fp32 bits, wherever it lies: in a whole
// block, in the tail's small blocks (the generic steps), at the first and last element, as +-Inf or NaN
// (whose bits are larger than any finite value's), and when y aliases x (the maximum is read before the
// block is overwritten). The encoder's NaN/Inf and range check rests on it.
TEST(HadamardRotation, ForwardReportsTheLargestMagnitudeItRead) {
  const scalar::RotationKey key{5, 8, 13};
  for (size_t b : {size_t{2}, size_t{16}, size_t{64}, size_t{256}}) {
    for (size_t n : {b, 3 * b + b / 2 + 7, size_t{1000}}) {
      const auto x = normal(n, 22);
      for (size_t at : {size_t{0}, n / 2, n - 1}) {
        for (const float special : {-3e30f, 0x1p100f, INFINITY, -INFINITY, NAN}) {
          SCOPED_TRACE(::testing::Message() << "n " << n << " b " << b << " at " << at << " value " << special);
          std::vector<float> v = x, y(n);
          v[at] = special;
          uint32_t want = 0;
          for (const float e : v) want = std::max(want, std::bit_cast<uint32_t>(e) & 0x7fffffffu);
          uint32_t got = 0xdeadbeef;
          rotateForward(v.data(), y.data(), n, b, key, 1.0f, 0, &got);
          ASSERT_EQ(got, want);
          got = 0xdeadbeef;
          rotateForward(v.data(), v.data(), n, b, key, 1.0f, 0, &got);  // in place
          ASSERT_EQ(got, want);
        }
      }
    }
  }
}

TEST(HadamardRotation, InverseSaturatesAtTheEdgeOfTheRangeInsteadOfOverflowing) {
  std::vector<float> y = {1.0e38f, 0.5e38f};  // the butterflies stay finite, the postscale does not
  rotateInverse(y.data(), y.data(), 2, 2, {0, 0, 0}, 4.0f);
  EXPECT_EQ(std::fabs(y[0]), FLT_MAX);  // D may flip the sign: compare magnitudes
  for (float v : y) EXPECT_TRUE(std::isfinite(v));
  // The same on 16-lane blocks, where the vector path saturates: every lane whose product overflows.
  std::vector<float> z(64);
  for (size_t i = 0; i < z.size(); ++i) z[i] = i % 3 ? 1.0e30f : -0.25f;  // sums stay finite; x 2^60 does not
  rotateInverse(z.data(), z.data(), z.size(), 64, {0, 1, 0}, 0x1p60f);
  size_t saturated = 0;
  for (float v : z) {
    ASSERT_TRUE(std::isfinite(v));
    saturated += std::fabs(v) == FLT_MAX;
  }
  EXPECT_GT(saturated, 0u);
}

}  // namespace
}  // namespace gradcomp::cpu
