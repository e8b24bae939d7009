// PowerSGD's products (kernels/cpu/low_rank.h) on every vector path the CPU runs give the scalar path's
// bits: the AVX-512 twins (low_rank_avx512.cc) keep each sum's order and roundings while changing how
// many rows go through a pass. The shapes cover the 8-lane dot's tail (m mod 8), the 16-lane vectors'
// tail (m mod 16), the four-row groups' tail (n mod 4) and ranks 1-5.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/low_rank.h"
#include "kernels/scalar/philox.h"
#include "tests/kernels/cpu_path_params.h"

namespace gradcomp::cpu {
namespace {

// Values over several binades (uniform in [-1, 1) times 2^(0..7)), so that a changed order of a sum or a
// fused multiply-add changes bits.
std::vector<float> spreadValues(size_t n, uint64_t key) {
  const auto s = scalar::RngStream::make(key, 7, 0, 0);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = (scalar::uniform01(s.word(2 * i)) * 2.0f - 1.0f) * static_cast<float>(1u << (s.word(2 * i + 1) % 8));
  return v;
}

struct Products {
  std::vector<float> mq, mtp, pqt;
};

// P = M Q (n x r), M^T P (m x r), P Q^T (n x m) for M n x m, Q m x r, P n x r.
Products productsOn(CpuPath path, const std::vector<float>& mat, const std::vector<float>& q,
                    const std::vector<float>& p, size_t n, size_t m, size_t r) {
  setCpuPath(path);
  Products out{std::vector<float>(n * r), std::vector<float>(m * r), std::vector<float>(n * m)};
  matmul(mat.data(), n, m, q.data(), r, out.mq.data());
  matmulTransposedA(mat.data(), n, m, p.data(), r, out.mtp.data());
  matmulTransposedB(p.data(), n, r, q.data(), m, out.pqt.data());
  return out;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class LowRankPaths : public CpuPathTest {};
// The vector paths only: on the scalar path this compares the scalar products with themselves.
class LowRankVectorPaths : public CpuPathTest {};

TEST_P(LowRankVectorPaths, EveryShapeGivesTheScalarBits) {
  int shapes = 0;
  for (const size_t n : {1, 3, 4, 5, 8, 9, 67})
    for (const size_t m : {1, 7, 8, 9, 15, 16, 17, 33, 100})
      for (const size_t r : {1, 2, 3, 5}) {
        const uint64_t key = n * 10000 + m * 10 + r;
        const std::vector<float> mat = spreadValues(n * m, key), q = spreadValues(m * r, key + 1),
                                 p = spreadValues(n * r, key + 2);
        const Products want = productsOn(CpuPath::Scalar, mat, q, p, n, m, r);
        const Products got = productsOn(GetParam(), mat, q, p, n, m, r);
        EXPECT_TRUE(sameBits(got.mq, want.mq)) << "M Q, n " << n << " m " << m << " r " << r;
        EXPECT_TRUE(sameBits(got.mtp, want.mtp)) << "M^T P, n " << n << " m " << m << " r " << r;
        EXPECT_TRUE(sameBits(got.pqt, want.pqt)) << "P Q^T, n " << n << " m " << m << " r " << r;
        ++shapes;
      }
  EXPECT_EQ(shapes, 7 * 9 * 4);
}

// The scalar path is the definition: M Q's entries are low_rank_order.h's lane sums, M^T P's the plain
// sums over M's rows in order, P Q^T's the plain sums over k in order (spot-checked on one shape, so a
// change of the definition itself fails here and not only in the training figures).
TEST_P(LowRankPaths, TheProductsFollowTheStatedOrder) {
  const size_t n = 13, m = 21, r = 3;
  const std::vector<float> mat = spreadValues(n * m, 5), q = spreadValues(m * r, 6), p = spreadValues(n * r, 7);
  const Products got = productsOn(GetParam(), mat, q, p, n, m, r);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < r; ++k) {
      float lane[8] = {};
      for (size_t j = 0; j < m; ++j) lane[j % 8] += mat[i * m + j] * q[j * r + k];
      const float want = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
      EXPECT_EQ(got.mq[i * r + k], want) << "M Q row " << i << " column " << k;
    }
  for (size_t j = 0; j < m; ++j)
    for (size_t k = 0; k < r; ++k) {
      float want = 0.0f;
      for (size_t i = 0; i < n; ++i) want += mat[i * m + j] * p[i * r + k];
      EXPECT_EQ(got.mtp[j * r + k], want) << "M^T P row " << j << " column " << k;
    }
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < m; ++j) {
      float want = p[i * r] * q[j * r];
      for (size_t k = 1; k < r; ++k) want += p[i * r + k] * q[j * r + k];
      EXPECT_EQ(got.pqt[i * m + j], want) << "P Q^T row " << i << " column " << j;
    }
}

INSTANTIATE_TEST_SUITE_P(CpuPaths, LowRankVectorPaths, ::testing::Values(CpuPath::Avx512, CpuPath::Avx2),
                         cpuPathTestName);
INSTANTIATE_TEST_SUITE_P(CpuPaths, LowRankPaths, ::testing::Values(CpuPath::Avx512, CpuPath::Avx2, CpuPath::Scalar),
                         cpuPathTestName);

}  // namespace
}  // namespace gradcomp::cpu
