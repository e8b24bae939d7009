#include "kernels/cuda/low_rank.cuh"

#include <cublas_v2.h>
#include <dlfcn.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/scalar/low_rank_order.h"

namespace gradcomp::cuda {
namespace {

// The cuBLAS entry points the products use, resolved once from the shared library.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) setStream = nullptr;
  decltype(&cublasSetMathMode) setMathMode = nullptr;
  decltype(&cublasSgemm_v2_64) sgemm = nullptr;  // 64-bit sizes: a large embedding exceeds INT_MAX elements
  std::string error;                             // why it could not be loaded ("" when it was)
};

template <typename F>
bool resolve(void* lib, const char* name, F& f, std::string& error) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) error = std::string("cuBLAS has no symbol ") + name;
  return f != nullptr;
}

CublasApi loadCublas() {
  CublasApi api;
  void* lib = nullptr;
  for (const char* name : {"libcublas.so.13", "libcublas.so"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
  if (!lib) {
    const char* why = dlerror();
    api.error = std::string("cannot load cuBLAS (libcublas.so.13): ") + (why ? why : "not found");
    return api;
  }
  // Never dlclose'd: the handles created from it live until the process ends.
  (void)(resolve(lib, "cublasCreate_v2", api.create, api.error) && resolve(lib, "cublasDestroy_v2", api.destroy, api.error) &&
      resolve(lib, "cublasSetStream_v2", api.setStream, api.error) &&
      resolve(lib, "cublasSetMathMode", api.setMathMode, api.error) &&
      resolve(lib, "cublasSgemm_v2_64", api.sgemm, api.error));
  return api;
}

const CublasApi& cublas() {
  static const CublasApi api = loadCublas();
  return api;
}

std::string failure(const char* call, cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? std::string()
                                         : std::string(call) + " failed with cuBLAS status " + std::to_string(status);
}

// Row-major matrices are cuBLAS's column-major transposes, so each product is written as the product of
// the transposes in the other order: (A B)^T = B^T A^T.
std::string gemm(void* handle, cublasOperation_t opB, cublasOperation_t opA, int64_t rows, int64_t cols, int64_t inner,
                 const float* b, int64_t ldb, const float* a, int64_t lda, float* c, int64_t ldc) {
  const float one = 1.0f, zero = 0.0f;
  return failure("cublasSgemm_64", cublas().sgemm(static_cast<cublasHandle_t>(handle), opB, opA, rows, cols, inner,
                                                  &one, b, ldb, a, lda, &zero, c, ldc));
}

constexpr int kOrthogonalizeThreads = 512;
constexpr size_t kMaxColumns = 1024;  // shared memory: 9 floats per column

// One CUDA block for the whole matrix: the columns depend on each other in order, and the work, O(rows x
// cols^2), is small beside the products' O(rows x m x cols). For column i: its norm's 8 lanes (one
// thread each, kernels/scalar/low_rank_order.h), the column scaled, the 8 lanes of its dot with each
// later column, then each later column minus its projection, with a barrier between the phases.
__global__ void orthogonalizeKernel(float* a, size_t rows, size_t cols, float epsilon) {
  extern __shared__ float shared[];
  float* lanes = shared;                                  // cols x kLowRankLanes partial sums
  float* projection = shared + cols * scalar::kLowRankLanes;  // cols dot products
  constexpr size_t kLanes = scalar::kLowRankLanes;
  for (size_t i = 0; i < cols; ++i) {
    if (threadIdx.x < kLanes) lanes[i * kLanes + threadIdx.x] = scalar::lowRankLaneDot(a + i, cols, a + i, cols, rows, threadIdx.x);
    __syncthreads();
    const float norm = __fsqrt_rn(scalar::lowRankLaneSum(lanes + i * kLanes));
    const bool zeroColumn = epsilon == 0.0f && norm == 0.0f;  // the CPU's rule: zeros, not 0/0
    const float d = __fadd_rn(norm, epsilon);
    for (size_t t = threadIdx.x; t < rows; t += blockDim.x) {
      float& v = a[t * cols + i];
      v = zeroColumn ? 0.0f : __fdiv_rn(v, d);
    }
    __syncthreads();
    const size_t later = cols - i - 1;
    for (size_t t = threadIdx.x; t < later * kLanes; t += blockDim.x) {
      const size_t j = i + 1 + t / kLanes, lane = t % kLanes;
      lanes[j * kLanes + lane] = scalar::lowRankLaneDot(a + i, cols, a + j, cols, rows, lane);
    }
    __syncthreads();
    for (size_t j = i + 1 + threadIdx.x; j < cols; j += blockDim.x) projection[j] = scalar::lowRankLaneSum(lanes + j * kLanes);
    __syncthreads();
    for (size_t t = threadIdx.x; t < rows * later; t += blockDim.x) {
      const size_t row = t / later, j = i + 1 + t % later;
      float& v = a[row * cols + j];
      v = __fsub_rn(v, __fmul_rn(projection[j], a[row * cols + i]));
    }
    __syncthreads();
  }
}

__global__ void residualKernel(const float* m, const float* approx, float ranks, size_t n, float* residual) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    residual[i] = __fsub_rn(m[i], __fdiv_rn(approx[i], ranks));
}

__global__ void divideKernel(const float* x, float d, size_t n, float* y) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    y[i] = __fdiv_rn(x[i], d);
}

}  // namespace

LowRankBlas* LowRankBlas::create(cudaStream_t stream, std::string* why) {
  const CublasApi& api = cublas();
  if (!api.error.empty()) {
    *why = api.error;
    return nullptr;
  }
  cublasHandle_t handle = nullptr;
  std::string error = failure("cublasCreate", api.create(&handle));
  if (error.empty()) error = failure("cublasSetStream", api.setStream(handle, stream));
  // Plain fp32 arithmetic: the default math mode uses no TF32 tensor cores for SGEMM (unless the user sets
  // NVIDIA_TF32_OVERRIDE=1), which is also torch's default for fp32 matmuls, so the speeds compare.
  if (error.empty()) error = failure("cublasSetMathMode", api.setMathMode(handle, CUBLAS_DEFAULT_MATH));
  if (!error.empty()) {
    if (handle) api.destroy(handle);
    *why = error;
    return nullptr;
  }
  return new LowRankBlas(handle);
}

LowRankBlas::~LowRankBlas() { cublas().destroy(static_cast<cublasHandle_t>(handle_)); }

std::string LowRankBlas::matmul(const float* a, size_t n, size_t m, const float* b, size_t r, float* c) {
  // C^T (r x n) = B^T (r x m) A^T (m x n).
  return gemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, r, n, m, b, r, a, m, c, r);
}

std::string LowRankBlas::matmulTransposedA(const float* a, size_t n, size_t m, const float* b, size_t r, float* c) {
  // C^T (r x m) = B^T (r x n) A (n x m); cuBLAS sees A as the m x n matrix A^T, so it transposes it.
  return gemm(handle_, CUBLAS_OP_N, CUBLAS_OP_T, r, m, n, b, r, a, m, c, r);
}

std::string LowRankBlas::matmulTransposedB(const float* a, size_t n, size_t r, const float* b, size_t m, float* c) {
  // C^T (m x n) = B (m x r) A^T (r x n); cuBLAS sees B as the r x m matrix B^T, so it transposes it.
  return gemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, r, b, r, a, r, c, m);
}

cudaError_t launchOrthogonalizeColumns(float* a, size_t rows, size_t cols, float epsilon, cudaStream_t stream) {
  if (cols == 0 || rows == 0) return cudaSuccess;
  if (cols > kMaxColumns) return cudaErrorInvalidValue;
  const size_t sharedBytes = cols * (scalar::kLowRankLanes + 1) * sizeof(float);
  orthogonalizeKernel<<<1, kOrthogonalizeThreads, sharedBytes, stream>>>(a, rows, cols, epsilon);
  return cudaGetLastError();
}

cudaError_t launchLowRankResidual(const float* m, const float* approx, float ranks, size_t n, float* residual,
                                  cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  residualKernel<<<detail::gridFor(n), detail::kThreads, 0, stream>>>(m, approx, ranks, n, residual);
  return cudaGetLastError();
}

cudaError_t launchDivide(const float* x, float d, size_t n, float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  divideKernel<<<detail::gridFor(n), detail::kThreads, 0, stream>>>(x, d, n, y);
  return cudaGetLastError();
}

}  // namespace gradcomp::cuda
