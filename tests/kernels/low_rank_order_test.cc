// The CUDA orthogonalization's schedule (kernels/cuda/low_rank.cu), emulated on the host with the same
// shared lane math (kernels/scalar/low_rank_order.h) and the same phases: per column the norm's 8 lanes,
// the scaling, the 8 lanes of each later column's dot, the projections. It must give the bits of
// cpu::orthogonalizeColumns, which is what lets the device path orthogonalize to the CPU's bits (the GPU
// parity suite checks the kernel itself where a GPU is present).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/low_rank.h"
#include "kernels/scalar/low_rank_order.h"
#include "kernels/scalar/philox.h"

namespace gradcomp {
namespace {

using scalar::kLowRankLanes;

void emulateDeviceOrthogonalize(float* a, size_t rows, size_t cols, float epsilon) {
  std::vector<float> lanes(cols * kLowRankLanes), projection(cols);
  for (size_t i = 0; i < cols; ++i) {
    for (size_t l = 0; l < kLowRankLanes; ++l)
      lanes[i * kLowRankLanes + l] = scalar::lowRankLaneDot(a + i, cols, a + i, cols, rows, l);
    const float norm = std::sqrt(scalar::lowRankLaneSum(lanes.data() + i * kLowRankLanes));
    const bool zeroColumn = epsilon == 0.0f && norm == 0.0f;
    const float d = norm + epsilon;
    for (size_t t = 0; t < rows; ++t) a[t * cols + i] = zeroColumn ? 0.0f : a[t * cols + i] / d;
    // The kernel's threads take (j, lane) pairs in any order: each writes its own lane, so the order of
    // this loop cannot matter; it runs backwards here to show that.
    for (size_t t = (cols - i - 1) * kLowRankLanes; t-- > 0;) {
      const size_t j = i + 1 + t / kLowRankLanes, lane = t % kLowRankLanes;
      lanes[j * kLowRankLanes + lane] = scalar::lowRankLaneDot(a + i, cols, a + j, cols, rows, lane);
    }
    for (size_t j = i + 1; j < cols; ++j) projection[j] = scalar::lowRankLaneSum(lanes.data() + j * kLowRankLanes);
    for (size_t t = 0; t < rows * (cols - i - 1); ++t) {
      const size_t row = t / (cols - i - 1), j = i + 1 + t % (cols - i - 1);
      a[row * cols + j] -= projection[j] * a[row * cols + i];
    }
  }
}

std::vector<float> normalMatrix(size_t n, uint64_t key) {
  const auto s = scalar::RngStream::make(key, 1, 2, 3);
  std::vector<float> m(n);
  for (size_t i = 0; i < n; ++i) m[i] = scalar::uniform01(s.word(i)) * 2.0f - 1.0f;
  return m;
}

TEST(LowRankOrder, TheDeviceScheduleOrthogonalizesToTheCpuBits) {
  size_t cases = 0;
  for (size_t rows : {1, 2, 7, 8, 9, 63, 64, 65, 1000, 4097})
    for (size_t cols : {1, 2, 3, 4, 8, 17})
      for (float epsilon : {1e-8f, 0.0f}) {
        auto a = normalMatrix(rows * cols, rows * 131 + cols);
        auto b = a;
        cpu::orthogonalizeColumns(a.data(), rows, cols, epsilon);
        emulateDeviceOrthogonalize(b.data(), rows, cols, epsilon);
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << rows << " x " << cols << " epsilon " << epsilon;
        ++cases;
      }
  EXPECT_EQ(cases, 120u);
}

TEST(LowRankOrder, ZeroAndDependentColumnsFollowTheEpsilonRule) {
  // Column 1 is zero and column 2 is column 0 doubled: with epsilon 0 the zero column stays zero (not
  // 0/0) and the dependent one becomes its normalized rounding noise (or zeros); both schedules agree.
  const size_t rows = 37, cols = 3;
  for (float epsilon : {0.0f, 1e-8f}) {
    auto a = normalMatrix(rows * cols, 5);
    for (size_t r = 0; r < rows; ++r) a[r * cols + 1] = 0.0f, a[r * cols + 2] = 2.0f * a[r * cols];
    auto b = a;
    cpu::orthogonalizeColumns(a.data(), rows, cols, epsilon);
    emulateDeviceOrthogonalize(b.data(), rows, cols, epsilon);
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "epsilon " << epsilon;
    for (size_t r = 0; r < rows; ++r) {
      ASSERT_EQ(a[r * cols + 1], 0.0f) << "row " << r;
      ASSERT_TRUE(std::isfinite(a[r * cols + 2])) << "row " << r;
    }
  }
}

TEST(LowRankOrder, LaneDotIsTheCpuDotsOrder) {
  // Lane l of a contiguous dot holds the terms i = l mod 8 in index order (values of mixed magnitude, so
  // another grouping would round differently).
  std::vector<float> x(1001);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0 ? 1e4f : 1e-3f) * (i % 2 ? -1.0f : 1.0f);
  float lane[kLowRankLanes];
  for (size_t l = 0; l < kLowRankLanes; ++l) lane[l] = scalar::lowRankLaneDot(x.data(), 1, x.data(), 1, x.size(), l);
  float expected[kLowRankLanes] = {};
  for (size_t i = 0; i < x.size(); ++i) expected[i % kLowRankLanes] += x[i] * x[i];
  for (size_t l = 0; l < kLowRankLanes; ++l) EXPECT_EQ(lane[l], expected[l]) << "lane " << l;
  // A one-column matrix's norm is that dot: orthogonalizing it divides by sqrt(laneSum) + epsilon.
  auto col = x;
  cpu::orthogonalizeColumns(col.data(), col.size(), 1, 0.0f);
  const float norm = std::sqrt(scalar::lowRankLaneSum(lane));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(col[i], x[i] / norm) << i;
}

}  // namespace
}  // namespace gradcomp
