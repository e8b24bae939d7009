// The dense math of the models, written so that its results are the same bits on every x86-64 CPU and in
// every build (-march=native on an AVX-512 or an AVX2 machine, or plain x86-64): a training run, its
// losses and its accuracies reproduce anywhere, and the figures quoted in the docs can be checked exactly.
//
// Why Eigen's own versions do not: its matrix products sum in an order set by the ISA's packet size and by
// blocking sizes read from the machine's caches, its vectorized reductions (sum, squaredNorm) add lanes in
// an ISA-dependent tree, and its exp uses FMA where the build has it; glibc's exp/log/cos/pow pick
// FMA-based variants at run time on CPUs that have FMA. Each of those moves a last bit somewhere, and a
// training run amplifies one bit into different accuracies (measured: sign without error feedback
// 96.94 % on an AVX-512 build against 95.82 % on a plain x86-64 one, before this file).
//
// So: products sum over the inner dimension in index order, one rounded multiply and one rounded add per
// term (-ffp-contract=off keeps them apart), vectorized only across independent outputs; reductions run
// in index order; exp, log, cos and integer powers are evaluated in double with +, -, *, / only (plus
// the exact frexp / ldexp / nearbyint), accurate to about 1e-16 relative, far below what fp32 keeps.
// Eigen is still used for storage and elementwise operations, which are one IEEE operation per element.
#pragma once

#include <cstdint>

#include <Eigen/Core>

namespace gradcomp {

using Matrix = Eigen::MatrixXf;  // column-major; rows are samples
using Vector = Eigen::VectorXf;

namespace repro {

// c = a * b for column-major operands with leading dimensions (Eigen's MatrixXf and Maps of it).
void gemm(Eigen::Index m, Eigen::Index n, Eigen::Index k, const float* a, Eigen::Index lda, const float* b,
          Eigen::Index ldb, float* c, Eigen::Index ldc);

// out = a * b, out = a^T * b, out = a * b^T. `out` is any writable dense column-major block of the result's
// shape (a Matrix is resized; a Map must already have it). The transposed operand is copied first, so every
// form sums over the inner dimension in the same order.
template <typename A, typename B, typename Out>
void multiply(const A& a, const B& b, Out& out) {
  const Matrix ad = a, bd = b;  // dense column-major copies (a no-op cost next to the product)
  if constexpr (requires { out.resize(ad.rows(), bd.cols()); }) out.resize(ad.rows(), bd.cols());
  eigen_assert(out.rows() == ad.rows() && out.cols() == bd.cols() && ad.cols() == bd.rows());
  gemm(ad.rows(), bd.cols(), ad.cols(), ad.data(), ad.rows(), bd.data(), bd.rows(), out.data(), out.outerStride());
}
template <typename A, typename B>
Matrix product(const A& a, const B& b) {
  Matrix out;
  multiply(a, b, out);
  return out;
}
template <typename A, typename B>
Matrix productTransposedA(const A& a, const B& b) {
  return product(Matrix(a.transpose()), b);
}
template <typename A, typename B>
Matrix productTransposedB(const A& a, const B& b) {
  return product(a, Matrix(b.transpose()));
}

// Sum of each column over the rows, in row order (a bias gradient).
Vector columnSums(const Matrix& m);
// Sum of each row over the columns, in column order (a softmax normalizer).
Vector rowSums(const Matrix& m);
// Sum of squares in double, in index order.
double squaredNorm(const Matrix& m);
// Index of the largest entry of row r (the first one on ties).
Eigen::Index argmaxOfRow(const Matrix& m, Eigen::Index r);

// Elementary functions in double: exp for any finite x (0 below -745, Inf above 709.78), log for x > 0,
// cos(2 pi u) for any finite u, base^n by squaring.
double exp(double x);
double log(double x);
double cos2pi(double u);
double powInt(double base, uint64_t n);

}  // namespace repro
}  // namespace gradcomp
