// The device math: kernels/cuda/low_rank.cuh on exec's device and stream. Every step is issued on that
// stream in the algorithm's order; download and upload wait for it, since the host then reads or reuses
// its buffer.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "collectives/low_rank_math.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "kernels/cuda/low_rank.cuh"

namespace gradcomp {
namespace {

void check(cudaError_t err, const char* what) {
  GRADCOMP_CHECK(err == cudaSuccess, BackendUnavailable, "PowerSGD on the device: ", what, " failed: ",
                 cudaGetErrorString(err));
}

void checkBlas(const std::string& failure) {
  GRADCOMP_CHECK(failure.empty(), BackendUnavailable, "PowerSGD on the device: ", failure);
}

class DeviceLowRankMath final : public LowRankMath {
 public:
  explicit DeviceLowRankMath(const ExecContext& exec) : exec_(exec) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    GRADCOMP_CHECK(err == cudaSuccess && count > 0, BackendUnavailable,
                   "PowerSGD on a CUDA buffer: no CUDA device is available (",
                   err == cudaSuccess ? "none found" : cudaGetErrorString(err), ")");
    GRADCOMP_CHECK(exec.cudaDevice >= 0 && exec.cudaDevice < count, BackendUnavailable,
                   "PowerSGD on a CUDA buffer: CUDA device ", exec.cudaDevice, " does not exist (", count, " visible)");
    enter();
    std::string why;
    blas_.reset(cuda::LowRankBlas::create(stream(), &why));
    GRADCOMP_CHECK(blas_ != nullptr, BackendUnavailable, "PowerSGD on a CUDA buffer needs cuBLAS for its products: ",
                   why);
  }

  Device device() const override { return Device::Cuda; }

  MathBuffer allocate(size_t n) override {
    enter();
    float* p = nullptr;
    check(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(float)), "cudaMalloc");
    const int device = exec_.cudaDevice;
    MathBuffer b{std::shared_ptr<float>(p, [device](float* q) {
                   cudaSetDevice(device);
                   cudaFree(q);  // synchronizes the device: no step still uses q
                 }),
                 n};
    check(cudaMemsetAsync(p, 0, n * sizeof(float), stream()), "cudaMemsetAsync");
    return b;
  }
  void download(const float* from, size_t n, float* host) override { copy(host, from, n, cudaMemcpyDeviceToHost); }
  void upload(const float* host, size_t n, float* to) override { copy(to, host, n, cudaMemcpyHostToDevice); }
  void add(Batch<const float> g, Batch<const float> e, size_t n, Batch<float> c) override {
    enter();
    check(cuda::launchAddBatch(g.data(), e.empty() ? nullptr : e.data(), c.data(), g.size(), n, stream()),
          "the residual add");
  }
  void orthogonalizeColumns(Batch<float> a, size_t rows, size_t cols, float epsilon) override {
    enter();
    check(cuda::launchOrthogonalizeColumns(a.data(), a.size(), rows, cols, epsilon, stream()), "the orthogonalization");
  }
  void matmul(Batch<const float> a, size_t n, size_t m, Batch<const float> b, size_t r, Batch<float> c) override {
    enter();
    checkBlas(blas_->matmul(a.data(), n, m, b.data(), r, c.data(), a.size()));
  }
  void matmulTransposedA(Batch<const float> a, size_t n, size_t m, Batch<const float> b, size_t r,
                         Batch<float> c) override {
    enter();
    checkBlas(blas_->matmulTransposedA(a.data(), n, m, b.data(), r, c.data(), a.size()));
  }
  void matmulTransposedB(Batch<const float> a, size_t n, size_t r, Batch<const float> b, size_t m,
                         Batch<float> c) override {
    enter();
    checkBlas(blas_->matmulTransposedB(a.data(), n, r, b.data(), m, c.data(), a.size()));
  }
  void residual(Batch<const float> m, Batch<const float> approx, float ranks, size_t n, Batch<float> residual) override {
    enter();
    check(cuda::launchLowRankResidual(m.data(), approx.data(), ranks, n, residual.data(), m.size(), stream()),
          "the residual update");
  }
  void divide(Batch<const float> x, float d, size_t n, Batch<float> y) override {
    enter();
    check(cuda::launchDivide(x.data(), d, n, y.data(), x.size(), stream()), "the division");
  }
  void finish() override {
    enter();
    check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  }

 private:
  cudaStream_t stream() const { return static_cast<cudaStream_t>(exec_.cudaStream); }
  void enter() const { check(cudaSetDevice(exec_.cudaDevice), "cudaSetDevice"); }
  void copy(float* to, const float* from, size_t n, cudaMemcpyKind kind) {
    if (n == 0) return;
    enter();
    check(cudaMemcpyAsync(to, from, n * sizeof(float), kind, stream()), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  }

  ExecContext exec_;
  std::unique_ptr<cuda::LowRankBlas> blas_;
};

}  // namespace

std::unique_ptr<LowRankMath> makeDeviceLowRankMath(const ExecContext& exec) {
  return std::make_unique<DeviceLowRankMath>(exec);
}

}  // namespace gradcomp
