// The CUDA twin of kernels/cpu/low_rank.h, PowerSGD's dense math on row-major fp32 device matrices:
// - the three products through cuBLAS (fp32 SGEMM, no TF32): they are the bulk of the work, and cuBLAS
//   sums in its own order, so their results agree with the CPU's within fp32 rounding, not bit for bit;
// - the orthogonalization in the CPU's exact order (kernels/scalar/low_rank_order.h), so it produces
//   the CPU's bits from the same input;
// - the element-wise steps (residual, scaling) as the CPU's fp32 expressions.
//
// Every step also takes a batch of same-shape matrices (PowerSGD's `batch` option, torch's
// batch_tensors_with_same_shape): one launch per kMaxBatch matrices instead of one per matrix, which is
// what a bucket of many small layers otherwise spends its time on. The addresses travel by value as a
// kernel parameter (no copy to the device, no wait); cuBLAS's batched product reads them from device
// memory, so a small kernel writes them there first, in stream order. A product of one matrix is the
// single SGEMM; the other steps run their batched kernels with a batch of one (the same expressions).
//
// cuBLAS is loaded when first used (dlopen of libcublas.so.13, then libcublas.so), not linked: a binary
// built here then runs its other CUDA paths on a GPU machine that lacks cuBLAS, and the low-rank path
// there says why it cannot run instead of the binary failing to start.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace gradcomp::cuda {

// Matrices per launch: three address arrays of kMaxBatch stay within the 4 KiB of a kernel's parameters.
constexpr size_t kMaxBatch = 128;

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
  // The same products over `count` same-shape matrices: c[i] = product(a[i], b[i]) (host arrays of
  // device addresses).
  std::string matmul(const float* const* a, size_t n, size_t m, const float* const* b, size_t r, float* const* c,
                     size_t count);
  std::string matmulTransposedA(const float* const* a, size_t n, size_t m, const float* const* b, size_t r,
                                float* const* c, size_t count);
  std::string matmulTransposedB(const float* const* a, size_t n, size_t r, const float* const* b, size_t m,
                                float* const* c, size_t count);

 private:
  LowRankBlas(void* handle, void** pointers, cudaStream_t stream, int device)
      : handle_(handle), pointers_(pointers), stream_(stream), device_(device) {}
  // One product over a batch: the single SGEMM for one matrix, the batched SGEMM for more.
  std::string gemmBatch(int opB, int opA, int64_t rows, int64_t cols, int64_t inner, const float* const* b, int64_t ldb,
                        const float* const* a, int64_t lda, float* const* c, int64_t ldc, size_t count);
  void* handle_;
  void** pointers_;  // device memory for 3 x kMaxBatch addresses (the batched SGEMM's arrays)
  cudaStream_t stream_;
  int device_;  // the device the handle and the address arrays belong to (current while they are freed)
};

// Orthonormalizes the columns of A (rows x cols, row-major, device) in place, left to right, with the
// CPU's epsilon rule and summation order: the same bits as cpu::orthogonalizeColumns.
cudaError_t launchOrthogonalizeColumns(float* a, size_t rows, size_t cols, float epsilon, cudaStream_t stream);
// The same for `count` same-shape matrices a[i] (one CUDA block each).
cudaError_t launchOrthogonalizeColumns(float* const* a, size_t count, size_t rows, size_t cols, float epsilon,
                                       cudaStream_t stream);

// c[i] = g[i] + e[i] over n elements of each of `count` matrices (e null: c[i] = g[i]).
cudaError_t launchAddBatch(const float* const* g, const float* const* e, float* const* c, size_t count, size_t n,
                           cudaStream_t stream);

// residual[i] = m[i] - approx[i] / ranks (PowerSGD's error feedback: what this rank's share of the sum
// of approximations left out).
cudaError_t launchLowRankResidual(const float* m, const float* approx, float ranks, size_t n, float* residual,
                                  cudaStream_t stream);
cudaError_t launchLowRankResidual(const float* const* m, const float* const* approx, float ranks, size_t n,
                                  float* const* residual, size_t count, cudaStream_t stream);

// y[i] = x[i] / d (y may alias x).
cudaError_t launchDivide(const float* x, float d, size_t n, float* y, cudaStream_t stream);
cudaError_t launchDivide(const float* const* x, float d, size_t n, float* const* y, size_t count, cudaStream_t stream);

}  // namespace gradcomp::cuda
