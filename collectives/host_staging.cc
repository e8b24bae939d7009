#include "collectives/host_staging.h"

#include <vector>

#include "core/error.h"

#ifdef GRADCOMP_HAVE_CUDA
#include "compressors/cuda_paths.h"
#include "core/cuda_check.h"
#include "kernels/cuda/low_rank.cuh"
#endif

namespace gradcomp {

AllreduceReport runWithHostStaging(std::span<float> deviceData, const ExecContext& exec,
                                   const std::function<AllreduceReport(std::span<float>)>& onHost) {
#ifdef GRADCOMP_HAVE_CUDA
  auto stream = static_cast<cudaStream_t>(exec.cudaStream);
  GRADCOMP_CUDA_CHECK(cudaSetDevice(exec.cudaDevice));
  std::vector<float> host(deviceData.size());
  const size_t bytes = deviceData.size_bytes();
  if (bytes) {
    GRADCOMP_CUDA_CHECK(cudaMemcpyAsync(host.data(), deviceData.data(), bytes, cudaMemcpyDeviceToHost, stream));
    GRADCOMP_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  AllreduceReport report = onHost(host);
  if (bytes) {
    GRADCOMP_CUDA_CHECK(cudaMemcpyAsync(deviceData.data(), host.data(), bytes, cudaMemcpyHostToDevice, stream));
    GRADCOMP_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return report;
#else
  (void)deviceData;
  (void)exec;
  (void)onHost;
  GRADCOMP_THROW(BackendUnavailable,
                 "all-reduce of a CUDA buffer: this build has no CUDA (configure with GRADCOMP_WITH_CUDA=ON)");
#endif
}

#ifdef GRADCOMP_HAVE_CUDA
namespace {
cudaStream_t enter(const ExecContext& exec) {
  GRADCOMP_CUDA_CHECK(cudaSetDevice(exec.cudaDevice));
  return static_cast<cudaStream_t>(exec.cudaStream);
}
}  // namespace

void requireCudaDevice(const ExecContext& exec, const std::string& what) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  GRADCOMP_CHECK(err == cudaSuccess && count > 0, BackendUnavailable, what, " on a CUDA buffer: no CUDA device is available (",
                 err == cudaSuccess ? "none found" : cudaGetErrorString(err), ")");
  GRADCOMP_CHECK(exec.cudaDevice >= 0 && exec.cudaDevice < count, BackendUnavailable, what, ": CUDA device ",
                 exec.cudaDevice, " does not exist (", count, " visible)");
}

uint64_t firstNonFiniteOnDevice(std::span<const float> deviceData, const ExecContext& exec) {
  return cudapath::firstNonFinite(deviceData.data(), deviceData.size(), exec);
}

void zeroOnDevice(std::span<float> deviceData, const ExecContext& exec) {
  const cudaStream_t stream = enter(exec);
  if (!deviceData.empty()) GRADCOMP_CUDA_CHECK(cudaMemsetAsync(deviceData.data(), 0, deviceData.size_bytes(), stream));
  GRADCOMP_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void divideOnDevice(std::span<float> deviceData, float d, const ExecContext& exec) {
  const cudaStream_t stream = enter(exec);
  GRADCOMP_CUDA_CHECK(cuda::launchDivide(deviceData.data(), d, deviceData.size(), deviceData.data(), stream));
  GRADCOMP_CUDA_CHECK(cudaStreamSynchronize(stream));
}

std::vector<float> copyToHost(std::span<const float> deviceData, const ExecContext& exec) {
  std::vector<float> host(deviceData.size());
  cudapath::copyToHost(host.data(), deviceData.data(), deviceData.size_bytes(), exec);
  return host;
}
#else
namespace {
[[noreturn]] void noCuda() {
  GRADCOMP_THROW(BackendUnavailable, "a CUDA buffer: this build has no CUDA (configure with GRADCOMP_WITH_CUDA=ON)");
}
}  // namespace
void requireCudaDevice(const ExecContext&, const std::string& what) {
  GRADCOMP_THROW(BackendUnavailable, what, " on a CUDA buffer: this build has no CUDA (configure with GRADCOMP_WITH_CUDA=ON)");
}
uint64_t firstNonFiniteOnDevice(std::span<const float>, const ExecContext&) { noCuda(); }
void zeroOnDevice(std::span<float>, const ExecContext&) { noCuda(); }
void divideOnDevice(std::span<float>, float, const ExecContext&) { noCuda(); }
std::vector<float> copyToHost(std::span<const float>, const ExecContext&) { noCuda(); }
#endif

}  // namespace gradcomp
