#include "kernels/cpu/low_rank.h"

#include <Eigen/Dense>
#include <cmath>

namespace gradcomp::cpu {
namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMajor>;
using Map = Eigen::Map<RowMajor>;

}  // namespace

void matmul(const float* a, size_t n, size_t m, const float* b, size_t r, float* c) {
  Map(c, static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(r)).noalias() =
      ConstMap(a, static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(m)) *
      ConstMap(b, static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(r));
}

void matmulTransposedA(const float* a, size_t n, size_t m, const float* b, size_t r, float* c) {
  Map(c, static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(r)).noalias() =
      ConstMap(a, static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(m)).transpose() *
      ConstMap(b, static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(r));
}

void matmulTransposedB(const float* a, size_t n, size_t r, const float* b, size_t m, float* c) {
  Map(c, static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(m)).noalias() =
      ConstMap(a, static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(r)) *
      ConstMap(b, static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(r)).transpose();
}

void orthogonalizeColumns(float* a, size_t rows, size_t cols, float epsilon) {
  Map m(a, static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  for (Eigen::Index i = 0; i < m.cols(); ++i) {
    const float norm = m.col(i).norm();
    // torch: without an epsilon a zero column would be 0/0; it fills it with zeros instead.
    if (epsilon == 0.0f && norm == 0.0f) {
      m.col(i).setZero();
    } else {
      m.col(i) /= norm + epsilon;
    }
    for (Eigen::Index j = i + 1; j < m.cols(); ++j) m.col(j) -= m.col(i).dot(m.col(j)) * m.col(i);
  }
}

}  // namespace gradcomp::cpu
