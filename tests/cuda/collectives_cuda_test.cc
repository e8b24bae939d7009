// GPU buffers through the collectives over a host transport (host staging; one GPU is enough). Built
// whenever CUDA is; ctest registers it only on a machine with a GPU, so it is never reported as passing
// where it did not run.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>

#include "collectives/allreduce.h"
#include "tests/collectives/collective_test_util.h"
#include "tests/cuda/cuda_test_util.h"

namespace gradcomp {
namespace {

using testing::deviceCount;

TEST(CudaCollectives, HostStagedAllreduceOfDeviceBuffersMatchesTheHostRunBitForBit) {
  ASSERT_GE(deviceCount(), 1) << "registered only where a GPU is present";
  const int p = 3;
  const size_t n = 100003;
  for (const char* codec : {"none", "int8", "fp16"}) {
    std::vector<std::vector<float>> host(p), device(p);
    testing::runRanksOk(p, [&](Communicator& comm) {
      AllreduceConfig c;
      c.codec = codec;
      auto onHost = AllreduceAlgorithm::make(c), onDevice = AllreduceAlgorithm::make(c);
      auto x = testing::normalInput(comm.rank(), n);
      auto y = x;
      onHost->run(x, comm);
      float* d = nullptr;
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(float)), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(d, y.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
      ExecContext gpu;
      gpu.device = Device::Cuda;
      onDevice->run(std::span(d, n), comm, {}, gpu);
      ASSERT_EQ(cudaMemcpy(y.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
      cudaFree(d);
      host[static_cast<size_t>(comm.rank())] = x;
      device[static_cast<size_t>(comm.rank())] = y;
    });
    for (int r = 0; r < p; ++r)
      EXPECT_EQ(0, std::memcmp(host[static_cast<size_t>(r)].data(), device[static_cast<size_t>(r)].data(), n * 4))
          << codec << " rank " << r;
  }
}


}  // namespace
}  // namespace gradcomp
