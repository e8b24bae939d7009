// GPU buffers through the collectives: host staging over a host transport (works on one GPU) and the
// NCCL transport (needs two GPUs: NCCL refuses two ranks on one device). Built whenever CUDA is; ctest
// registers it only on a machine with a GPU, so it is never reported as passing where it did not run.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>

#include "collectives/allreduce.h"
#ifdef GRADCOMP_HAVE_NCCL
#include "collectives/nccl_communicator.h"
#endif
#include "tests/collectives/collective_test_util.h"

namespace gradcomp {
namespace {

int deviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

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

#ifdef GRADCOMP_HAVE_NCCL
TEST(CudaCollectives, NcclVendorAllreduceWithDeadline) {
  if (deviceCount() < 2) GTEST_SKIP() << "NCCL needs one GPU per rank; this machine has " << deviceCount();
  const int p = std::min(deviceCount(), 4);
  const size_t n = 1 << 20;
  testing::runRanksOk(p, [&](Communicator& bootstrap) {
    ASSERT_EQ(cudaSetDevice(bootstrap.rank()), cudaSuccess);
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    auto nccl = makeNcclCommunicator(bootstrap, bootstrap.rank(), stream);
    const auto x = testing::exactInput(bootstrap.rank(), p, n);
    float* d = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    AllreduceConfig c;
    c.algorithm = "vendor";
    AllreduceAlgorithm::make(c)->run(std::span(d, n), *nccl, {}, ExecContext{Device::Cuda, bootstrap.rank(), stream, 1});
    std::vector<float> y(n);
    ASSERT_EQ(cudaMemcpy(y.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(y, testing::exactSum(p, n));
    cudaFree(d);
    nccl.reset();
    cudaStreamDestroy(stream);
  });
}
#endif

}  // namespace
}  // namespace gradcomp
