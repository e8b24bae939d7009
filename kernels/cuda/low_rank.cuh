// The CUDA twin of kernels/cpu/low_rank.h, PowerSGD's dense math on row-major fp32 device matrices:
// - the three products through cuBLAS (fp32 SGEMM, no TF32): they are the bulk of the work, and cuBLAS
//   sums in its own order, so their results agree with the CPU's within fp32 rounding, not bit for bit;
// - the orthogonalization in the CPU's exact order (kernels/scalar/low_rank_order.h), so it produces
//   the CPU's bits from the same input;
// - the element-wise steps (residual, scaling) as the CPU's fp32 expressions.
//
// cuBLAS is loaded when first used (dlopen of libcublas.so.13, then libcublas.so), not linked: a binary
// built here then runs its other CUDA paths on a GPU machine that lacks cuBLAS, and the low-rank path
// there says why it cannot run instead of the binary failing to start.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace gradcomp::cuda {

// A cuBLAS handle on one stream (cublasHandle_t, type-erased so this header needs no cuBLAS headers).
class LowRankBlas {
 public:
  // Loads cuBLAS and creates a handle for the current device. Returns null and sets *why when cuBLAS
  // cannot be loaded or the handle cannot be created.
  static LowRankBlas* create(cudaStream_t stream, std::string* why);
  ~LowRankBlas();
  LowRankBlas(const LowRankBlas&) = delete;
  LowRankBlas& operator=(const LowRankBlas&) = delete;

  // The products, as in kernels/cpu/low_rank.h. Each returns "" or the failing call and cuBLAS's status.
  // C (n x r) = A (n x m) B (m x r).
  std::string matmul(const float* a, size_t n, size_t m, const float* b, size_t r, float* c);
  // C (m x r) = A^T B, A given as n x m, B as n x r.
  std::string matmulTransposedA(const float* a, size_t n, size_t m, const float* b, size_t r, float* c);
  // C (n x m) = A (n x r) B^T, B given as m x r.
  std::string matmulTransposedB(const float* a, size_t n, size_t r, const float* b, size_t m, float* c);

 private:
  explicit LowRankBlas(void* handle) : handle_(handle) {}
  void* handle_;
};

// Orthonormalizes the columns of A (rows x cols, row-major, device) in place, left to right, with the
// CPU's epsilon rule and summation order: the same bits as cpu::orthogonalizeColumns.
cudaError_t launchOrthogonalizeColumns(float* a, size_t rows, size_t cols, float epsilon, cudaStream_t stream);

// residual[i] = m[i] - approx[i] / ranks (PowerSGD's error feedback: what this rank's share of the sum
// of approximations left out).
cudaError_t launchLowRankResidual(const float* m, const float* approx, float ranks, size_t n, float* residual,
                                  cudaStream_t stream);

// y[i] = x[i] / d (y may alias x).
cudaError_t launchDivide(const float* x, float d, size_t n, float* y, cudaStream_t stream);

}  // namespace gradcomp::cuda
