// The dense math of PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019) on row-major fp32 matrices,
// through Eigen: the two products P = M Q and Q = M^T P, the approximation M' = P Q^T, and the
// Gram-Schmidt orthogonalization with an epsilon that torch's powerSGD_hook uses
// (col /= ||col|| + eps, then the column's projection removed from the later columns).
//
// Eigen picks its kernels at compile time, so one binary gives the same bits on every run and every rank
// (ranks of one job run one binary); two builds for different ISAs may differ in the last bits of a
// product, unlike the codecs (whose golden hashes hold on every build).
#pragma once

#include <cstddef>

namespace gradcomp::cpu {

// C (n x r) = A (n x m) B (m x r).
void matmul(const float* a, size_t n, size_t m, const float* b, size_t r, float* c);
// C (m x r) = A^T (m x n) B (n x r), A given as n x m.
void matmulTransposedA(const float* a, size_t n, size_t m, const float* b, size_t r, float* c);
// C (n x m) = A (n x r) B^T (r x m), B given as m x r.
void matmulTransposedB(const float* a, size_t n, size_t r, const float* b, size_t m, float* c);
// Orthonormalizes the columns of A (rows x cols, row-major) in place, left to right.
void orthogonalizeColumns(float* a, size_t rows, size_t cols, float epsilon);

}  // namespace gradcomp::cpu
