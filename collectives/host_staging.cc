#include "collectives/host_staging.h"

#include <vector>

#include "core/error.h"

#ifdef GRADCOMP_HAVE_CUDA
#include "core/cuda_check.h"
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

}  // namespace gradcomp
