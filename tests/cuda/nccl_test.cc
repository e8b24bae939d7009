// The NCCL transport: vendor all-reduce of device buffers with a deadline, one GPU per rank (NCCL refuses
// two ranks on one device). ctest registers it only where nvidia-smi lists two or more GPUs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "collectives/allreduce.h"
#include "collectives/nccl_communicator.h"
#include "tests/collectives/collective_test_util.h"
#include "tests/cuda/cuda_test_util.h"

namespace gradcomp {
namespace {

using testing::deviceCount;

TEST(CudaCollectives, NcclVendorAllreduceWithDeadline) {
  ASSERT_GE(deviceCount(), 2) << "registered only where two or more GPUs are present";
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

}  // namespace
}  // namespace gradcomp
