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
  decltype(&cublasSgemmBatched_64) sgemmBatched = nullptr;
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
      resolve(lib, "cublasSgemm_v2_64", api.sgemm, api.error) &&
      resolve(lib, "cublasSgemmBatched_64", api.sgemmBatched, api.error));
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

// Up to kMaxBatch addresses, passed to a kernel by value.
template <typename T>
struct Addresses {
  T* at[kMaxBatch];
};

template <typename T>
Addresses<T> addressesOf(T* const* list, size_t count) {
  Addresses<T> a{};
  for (size_t i = 0; i < count; ++i) a.at[i] = list[i];
  return a;
}

// The batched SGEMM's three address arrays, written to device memory in stream order (the next batch's
// write waits for this batch's product on the same stream, so one buffer serves every call).
// (cuBLAS's first operand, its second, the products) at out, out + kMaxBatch and out + 2 kMaxBatch.
__global__ void storeAddressesKernel(Addresses<const float> first, Addresses<const float> second,
                                     Addresses<float> product, size_t count, void** out) {
  const size_t i = threadIdx.x;
  if (i < count) {
    out[i] = const_cast<float*>(first.at[i]);
    out[kMaxBatch + i] = const_cast<float*>(second.at[i]);
    out[2 * kMaxBatch + i] = product.at[i];
  }
}

// Runs f(first, count) over [0, total) in launches of at most kMaxBatch, stopping at the first failure.
template <typename Error, typename F>
Error forEachLaunch(size_t total, Error ok, F&& f) {
  for (size_t first = 0; first < total; first += kMaxBatch) {
    const Error e = f(first, total - first < kMaxBatch ? total - first : kMaxBatch);
    if (e != ok) return e;
  }
  return ok;
}

constexpr int kOrthogonalizeThreads = 512;
constexpr size_t kMaxColumns = 1024;  // shared memory: 9 floats per column

// One CUDA block for the whole matrix: the columns depend on each other in order, and the work, O(rows x
// cols^2), is small beside the products' O(rows x m x cols). For column i: its norm's 8 lanes (one
// thread each, kernels/scalar/low_rank_order.h), the column scaled, the 8 lanes of its dot with each
// later column, then each later column minus its projection, with a barrier between the phases.
__device__ void orthogonalizeMatrix(float* a, size_t rows, size_t cols, float epsilon) {
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

// One CUDA block per matrix of the batch.
__global__ void orthogonalizeKernel(Addresses<float> a, size_t rows, size_t cols, float epsilon) {
  orthogonalizeMatrix(a.at[blockIdx.x], rows, cols, epsilon);
}

// The element-wise steps: gridDim.y runs over the batch's matrices, x over each one's n elements.
#define GRADCOMP_EACH_ELEMENT(i, n) \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

__global__ void addKernel(Addresses<const float> g, Addresses<const float> e, bool hasE, size_t n, Addresses<float> c) {
  const float* gm = g.at[blockIdx.y];
  const float* em = hasE ? e.at[blockIdx.y] : nullptr;
  float* cm = c.at[blockIdx.y];
  GRADCOMP_EACH_ELEMENT(i, n) cm[i] = detail::addend(gm, em, i);
}

__global__ void residualKernel(Addresses<const float> m, Addresses<const float> approx, float ranks, size_t n,
                               Addresses<float> residual) {
  const float* mm = m.at[blockIdx.y];
  const float* am = approx.at[blockIdx.y];
  float* rm = residual.at[blockIdx.y];
  GRADCOMP_EACH_ELEMENT(i, n) rm[i] = __fsub_rn(mm[i], __fdiv_rn(am[i], ranks));
}

__global__ void divideKernel(Addresses<const float> x, float d, size_t n, Addresses<float> y) {
  const float* xm = x.at[blockIdx.y];
  float* ym = y.at[blockIdx.y];
  GRADCOMP_EACH_ELEMENT(i, n) ym[i] = __fdiv_rn(xm[i], d);
}

#undef GRADCOMP_EACH_ELEMENT

// The element-wise grid for `count` matrices of n elements.
dim3 elementGrid(size_t n, size_t count) { return dim3(detail::gridFor(n), static_cast<unsigned>(count)); }

}  // namespace

LowRankBlas* LowRankBlas::create(cudaStream_t stream, std::string* why) {
  const CublasApi& api = cublas();
  if (!api.error.empty()) {
    *why = api.error;
    return nullptr;
  }
  void** pointers = nullptr;
  const cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&pointers), 3 * kMaxBatch * sizeof(void*));
  if (err != cudaSuccess) {
    *why = std::string("cudaMalloc of the batched products' address arrays failed: ") + cudaGetErrorString(err);
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
    cudaFree(pointers);
    *why = error;
    return nullptr;
  }
  int device = 0;
  cudaGetDevice(&device);
  return new LowRankBlas(handle, pointers, stream, device);
}

LowRankBlas::~LowRankBlas() {
  // The owner may be on another device by now (PowerSGD's math follows the buffers it is given): the
  // handle and the arrays are released on theirs, and the caller's device is restored.
  int current = 0;
  const bool known = cudaGetDevice(&current) == cudaSuccess;
  cudaSetDevice(device_);
  cublas().destroy(static_cast<cublasHandle_t>(handle_));
  cudaFree(pointers_);  // synchronizes the device: no product still reads the addresses
  if (known) cudaSetDevice(current);
}

// Row-major matrices are cuBLAS's column-major transposes, so each product is written as the product of
// the transposes in the other order: (A B)^T = B^T A^T.
std::string LowRankBlas::gemmBatch(int opB, int opA, int64_t rows, int64_t cols, int64_t inner, const float* const* b,
                                   int64_t ldb, const float* const* a, int64_t lda, float* const* c, int64_t ldc,
                                   size_t count) {
  const float one = 1.0f, zero = 0.0f;
  const auto handle = static_cast<cublasHandle_t>(handle_);
  const auto tb = static_cast<cublasOperation_t>(opB), ta = static_cast<cublasOperation_t>(opA);
  if (count == 1)
    return failure("cublasSgemm_64", cublas().sgemm(handle, tb, ta, rows, cols, inner, &one, b[0], ldb, a[0], lda,
                                                    &zero, c[0], ldc));
  return forEachLaunch(count, std::string(), [&](size_t first, size_t k) {
    storeAddressesKernel<<<1, kMaxBatch, 0, stream_>>>(addressesOf(b + first, k), addressesOf(a + first, k),
                                                        addressesOf(c + first, k), k, pointers_);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return std::string("writing the batched product's addresses failed: ") + cudaGetErrorString(err);
    const auto arrays = reinterpret_cast<const float* const*>(pointers_);
    return failure("cublasSgemmBatched_64",
                   cublas().sgemmBatched(handle, tb, ta, rows, cols, inner, &one, arrays, ldb, arrays + kMaxBatch, lda,
                                         &zero, reinterpret_cast<float* const*>(pointers_) + 2 * kMaxBatch, ldc,
                                         static_cast<int64_t>(k)));
  });
}

std::string LowRankBlas::matmul(const float* const* a, size_t n, size_t m, const float* const* b, size_t r,
                                float* const* c, size_t count) {
  // C^T (r x n) = B^T (r x m) A^T (m x n).
  return gemmBatch(CUBLAS_OP_N, CUBLAS_OP_N, r, n, m, b, r, a, m, c, r, count);
}

std::string LowRankBlas::matmulTransposedA(const float* const* a, size_t n, size_t m, const float* const* b, size_t r,
                                           float* const* c, size_t count) {
  // C^T (r x m) = B^T (r x n) A (n x m); cuBLAS sees A as the m x n matrix A^T, so it transposes it.
  return gemmBatch(CUBLAS_OP_N, CUBLAS_OP_T, r, m, n, b, r, a, m, c, r, count);
}

std::string LowRankBlas::matmulTransposedB(const float* const* a, size_t n, size_t r, const float* const* b, size_t m,
                                           float* const* c, size_t count) {
  // C^T (m x n) = B (m x r) A^T (r x n); cuBLAS sees B as the r x m matrix B^T, so it transposes it.
  return gemmBatch(CUBLAS_OP_T, CUBLAS_OP_N, m, n, r, b, r, a, r, c, m, count);
}

std::string LowRankBlas::matmul(const float* a, size_t n, size_t m, const float* b, size_t r, float* c) {
  return matmul(&a, n, m, &b, r, &c, 1);
}

std::string LowRankBlas::matmulTransposedA(const float* a, size_t n, size_t m, const float* b, size_t r, float* c) {
  return matmulTransposedA(&a, n, m, &b, r, &c, 1);
}

std::string LowRankBlas::matmulTransposedB(const float* a, size_t n, size_t r, const float* b, size_t m, float* c) {
  return matmulTransposedB(&a, n, r, &b, m, &c, 1);
}

cudaError_t launchOrthogonalizeColumns(float* const* a, size_t count, size_t rows, size_t cols, float epsilon,
                                       cudaStream_t stream) {
  if (cols == 0 || rows == 0 || count == 0) return cudaSuccess;
  if (cols > kMaxColumns) return cudaErrorInvalidValue;
  const size_t sharedBytes = cols * (scalar::kLowRankLanes + 1) * sizeof(float);
  return forEachLaunch(count, cudaSuccess, [&](size_t first, size_t k) {
    orthogonalizeKernel<<<static_cast<unsigned>(k), kOrthogonalizeThreads, sharedBytes, stream>>>(
        addressesOf(a + first, k), rows, cols, epsilon);
    return cudaGetLastError();
  });
}

cudaError_t launchOrthogonalizeColumns(float* a, size_t rows, size_t cols, float epsilon, cudaStream_t stream) {
  return launchOrthogonalizeColumns(&a, 1, rows, cols, epsilon, stream);
}

cudaError_t launchAddBatch(const float* const* g, const float* const* e, float* const* c, size_t count, size_t n,
                           cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return forEachLaunch(count, cudaSuccess, [&](size_t first, size_t k) {
    addKernel<<<elementGrid(n, k), detail::kThreads, 0, stream>>>(
        addressesOf(g + first, k), e ? addressesOf(e + first, k) : Addresses<const float>{}, e != nullptr, n,
        addressesOf(c + first, k));
    return cudaGetLastError();
  });
}

cudaError_t launchLowRankResidual(const float* const* m, const float* const* approx, float ranks, size_t n,
                                  float* const* residual, size_t count, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return forEachLaunch(count, cudaSuccess, [&](size_t first, size_t k) {
    residualKernel<<<elementGrid(n, k), detail::kThreads, 0, stream>>>(addressesOf(m + first, k),
                                                                      addressesOf(approx + first, k), ranks, n,
                                                                      addressesOf(residual + first, k));
    return cudaGetLastError();
  });
}

cudaError_t launchLowRankResidual(const float* m, const float* approx, float ranks, size_t n, float* residual,
                                  cudaStream_t stream) {
  return launchLowRankResidual(&m, &approx, ranks, n, &residual, 1, stream);
}

cudaError_t launchDivide(const float* const* x, float d, size_t n, float* const* y, size_t count, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return forEachLaunch(count, cudaSuccess, [&](size_t first, size_t k) {
    divideKernel<<<elementGrid(n, k), detail::kThreads, 0, stream>>>(addressesOf(x + first, k), d, n,
                                                                    addressesOf(y + first, k));
    return cudaGetLastError();
  });
}

cudaError_t launchDivide(const float* x, float d, size_t n, float* y, cudaStream_t stream) {
  return launchDivide(&x, d, n, &y, 1, stream);
}

}  // namespace gradcomp::cuda
