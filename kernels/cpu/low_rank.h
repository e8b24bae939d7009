// The dense math of PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019) on row-major fp32 matrices: the
// two products P = M Q and Q = M^T P, the approximation M' = P Q^T, and the Gram-Schmidt orthogonalization
// with an epsilon that torch's powerSGD_hook uses (col /= ||col|| + eps, then the column's projection
// removed from the later columns).
//
// Every sum runs in an order fixed by the source (low_rank.cc), so the bits are the same on every x86-64
// CPU and build (AVX2 or AVX-512), as the codecs' and the models' math: a general BLAS (Eigen's, MKL's)
// picks its summation order by ISA, and a trained model would then depend on the machine. The products
// PowerSGD needs are tall and skinny (r <= a few dozen), so they are bound by reading M, which these loops
// do once per product, vectorized; on the avx512 path of cpu_path.h (chosen at run time, so the Python
// package built for plain x86-64 takes it too) low_rank_avx512.h's twins run four rows per pass in the
// same order (scripts/bench-powersgd puts them beside torch's).
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
