// Where PowerSGD's dense math runs (collectives/powersgd_allreduce.cc): on the host, through
// kernels/cpu/low_rank.h, or on a CUDA device, through kernels/cuda/low_rank.cuh (cuBLAS products, the
// CPU's orthogonalization bits). The algorithm runs one sequence of steps on either; only the factors P
// and Q cross to the host for the ring sums, so a gradient on the device stays there (M, the residual
// and the output never leave it).
//
// The device math's products sum in cuBLAS's order, so its P, Q and output agree with the host math's
// within fp32 rounding (tests/cuda/collectives_cuda_test.cc states the bound), not bit for bit; its
// orthogonalization and element-wise steps are the host's fp32 expressions.
//
// Each step takes a batch: the addresses of same-shape matrices it applies to, each on its own. The
// algorithm passes one matrix at a time, or with its `batch` option all the bucket's matrices of one
// shape; the host runs a batch matrix by matrix (the same bits either way), the device in one launch
// per step instead of one per matrix.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "core/exec_context.h"

namespace gradcomp {

// n floats of the math's memory (host or device), freed with the last copy of the handle.
struct MathBuffer {
  std::shared_ptr<float> memory;
  size_t size = 0;
  float* get() const { return memory.get(); }
};

// Addresses of same-shape matrices in the math's memory.
template <typename T>
using Batch = std::span<T* const>;

class LowRankMath {
 public:
  virtual ~LowRankMath() = default;
  virtual Device device() const = 0;
  virtual MathBuffer allocate(size_t n) = 0;  // zeroed
  // Host <-> the math's memory (on the host: a copy; on a device: a copy that is complete on return).
  virtual void download(const float* from, size_t n, float* host) = 0;
  virtual void upload(const float* host, size_t n, float* to) = 0;
  // Each matrix i of a batch (n elements, or the shapes named):
  // c = g + e (e empty: c = g).
  virtual void add(Batch<const float> g, Batch<const float> e, size_t n, Batch<float> c) = 0;
  virtual void orthogonalizeColumns(Batch<float> a, size_t rows, size_t cols, float epsilon) = 0;
  // The products of kernels/cpu/low_rank.h: C = A B, C = A^T B, C = A B^T.
  virtual void matmul(Batch<const float> a, size_t n, size_t m, Batch<const float> b, size_t r, Batch<float> c) = 0;
  virtual void matmulTransposedA(Batch<const float> a, size_t n, size_t m, Batch<const float> b, size_t r,
                                 Batch<float> c) = 0;
  virtual void matmulTransposedB(Batch<const float> a, size_t n, size_t r, Batch<const float> b, size_t m,
                                 Batch<float> c) = 0;
  // residual = m - approx / ranks.
  virtual void residual(Batch<const float> m, Batch<const float> approx, float ranks, size_t n,
                        Batch<float> residual) = 0;
  // y = x / d (y may alias x).
  virtual void divide(Batch<const float> x, float d, size_t n, Batch<float> y) = 0;
  // Waits until every step issued so far is done (the device's stream; nothing on the host).
  virtual void finish() = 0;
};

std::unique_ptr<LowRankMath> makeHostLowRankMath();
// On exec's CUDA device and stream. Throws BackendUnavailable when this build has no CUDA, the device does
// not answer, or cuBLAS cannot be loaded, saying which (low_rank_math_cuda.cc / low_rank_math_unavailable.cc).
std::unique_ptr<LowRankMath> makeDeviceLowRankMath(const ExecContext& exec);

}  // namespace gradcomp
