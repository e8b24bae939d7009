// GPU buffers through the collectives over a host transport (host staging; one GPU is enough). Built
// whenever CUDA is; ctest registers it only on a machine with a GPU, so it is never reported as passing
// where it did not run.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>

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



// PowerSGD on device buffers (collectives/low_rank_math.h): M, the residual and Q stay on the device and
// only P and Q cross to the host for the rings. cuBLAS sums the products in its own order, so each step's
// output is within a relative L2 of 1e-4 of the host run's (the products' fp32 rounding, grown through
// the warm start and the residual over the steps); the tensor left exact (a vector) is the same ring as
// on the host, bit for bit; and a checkpoint taken on the device resumes on the device bitwise.
TEST(CudaCollectives, PowerSgdOnDeviceBuffersTracksTheHostMathAndResumesBitwise) {
  ASSERT_GE(deviceCount(), 1) << "registered only where a GPU is present";
  const int p = 3, steps = 4;
  const uint64_t rows = 257, cols = 129, bias = 77;
  const uint64_t n = rows * cols + bias;
  const std::vector<MatrixSegment> layout = {{0, rows * cols, rows}, {rows * cols, bias, 0}};
  for (const char* codec : {"none", "fp16"}) {
    SCOPED_TRACE(codec);
    AllreduceConfig c;
    c.algorithm = "powersgd";
    c.codec = codec;
    c.errorFeedback = "ef";
    c.lowRank = "rank=2";
    c.seed = 5;
    using PerRank = std::vector<std::vector<float>>;
    std::vector<PerRank> host(steps, PerRank(p)), device(steps, PerRank(p)), resumed(steps, PerRank(p));
    testing::runRanksOk(p, [&](Communicator& comm) {
      auto onHost = AllreduceAlgorithm::make(c), onDevice = AllreduceAlgorithm::make(c),
           again = AllreduceAlgorithm::make(c);
      ExecContext gpu;
      gpu.device = Device::Cuda;
      float* d = nullptr;
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(float)), cudaSuccess);
      std::string checkpoint;
      auto deviceStep = [&](AllreduceAlgorithm& algo, std::vector<float> g, uint32_t step) {
        EXPECT_EQ(cudaMemcpy(d, g.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
        algo.run(std::span(d, n), comm, {3, step, false, 0, layout}, gpu);
        EXPECT_EQ(cudaMemcpy(g.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
        return g;
      };
      for (int s = 0; s < steps; ++s) {
        const uint32_t step = static_cast<uint32_t>(s);
        const auto g = testing::normalInput(comm.rank() * 100 + s, n);
        auto x = g;
        onHost->run(x, comm, {3, step, false, 0, layout});
        const auto r = static_cast<size_t>(comm.rank());
        host[s][r] = x;
        device[s][r] = deviceStep(*onDevice, g, step);
        if (s == 1) {
          std::ostringstream o;
          onDevice->saveState(o);
          std::istringstream in(o.str());
          again->loadState(in);
        }
        if (s >= 2) resumed[s][r] = deviceStep(*again, g, step);
      }
      cudaFree(d);
    });
    for (int s = 0; s < steps; ++s)
      for (size_t r = 0; r < static_cast<size_t>(p); ++r) {
        const auto& h = host[s][r];
        const auto& g = device[s][r];
        double diff = 0, norm = 0;
        for (uint64_t i = 0; i < rows * cols; ++i) {
          diff += (double(g[i]) - h[i]) * (double(g[i]) - h[i]);
          norm += double(h[i]) * h[i];
        }
        EXPECT_LE(std::sqrt(diff / norm), 1e-4) << "step " << s << " rank " << r;
        EXPECT_EQ(0, std::memcmp(h.data() + rows * cols, g.data() + rows * cols, bias * sizeof(float)))
            << "the exact vector, step " << s << " rank " << r;
        if (s >= 2) {
          EXPECT_EQ(0, std::memcmp(g.data(), resumed[s][r].data(), n * sizeof(float)))
              << "resumed from the checkpoint, step " << s << " rank " << r;
        }
      }
  }
}

// PowerSGD's batch option on the device: a bucket of kMaxBatch + 3 same-shape matrices (two launches per
// step) and one of another shape, with a vector between them. Batched on the device tracks the host's
// batched run (which is bit-equal to its unbatched run, tests/collectives/powersgd_test.cc) within the
// same 1e-4 as the unbatched device math, and the device's batched and unbatched runs agree within it.
TEST(CudaCollectives, PowerSgdBatchedOnTheDeviceTracksTheHostMath) {
  ASSERT_GE(deviceCount(), 1) << "registered only where a GPU is present";
  const int p = 2, steps = 3;
  const uint64_t rows = 24, cols = 20, count = 131;
  std::vector<MatrixSegment> layout;
  uint64_t n = 0;
  for (uint64_t i = 0; i < count; ++i) {
    layout.push_back({n, rows * cols, rows});
    n += rows * cols;
    if (i == 5) {
      layout.push_back({n, 17, 0});  // a vector, left exact
      n += 17;
      layout.push_back({n, 40 * 30, 40});  // another shape, a batch of its own
      n += 40 * 30;
    }
  }
  using PerRank = std::vector<std::vector<float>>;
  auto run = [&](bool onDevice, bool batched) {
    std::vector<PerRank> out(steps, PerRank(p));
    AllreduceConfig c;
    c.algorithm = "powersgd";
    c.errorFeedback = "ef";
    c.lowRank = std::string("rank=1,batch=") + (batched ? "true" : "false");
    c.seed = 5;
    testing::runRanksOk(p, [&](Communicator& comm) {
      auto algo = AllreduceAlgorithm::make(c);
      ExecContext gpu;
      gpu.device = Device::Cuda;
      float* d = nullptr;
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(float)), cudaSuccess);
      for (int s = 0; s < steps; ++s) {
        auto g = testing::normalInput(comm.rank() * 100 + s, n);
        const AllreduceCall op{3, static_cast<uint32_t>(s), false, 0, layout};
        if (onDevice) {
          ASSERT_EQ(cudaMemcpy(d, g.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
          algo->run(std::span(d, n), comm, op, gpu);
          ASSERT_EQ(cudaMemcpy(g.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
        } else {
          algo->run(g, comm, op);
        }
        out[s][static_cast<size_t>(comm.rank())] = std::move(g);
      }
      cudaFree(d);
    });
    return out;
  };
  const auto host = run(false, true), batched = run(true, true), single = run(true, false);
  auto relative = [](const std::vector<float>& a, const std::vector<float>& b) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      norm += double(b[i]) * b[i];
    }
    return std::sqrt(diff / norm);
  };
  for (int s = 0; s < steps; ++s)
    for (size_t r = 0; r < static_cast<size_t>(p); ++r) {
      EXPECT_LE(relative(batched[s][r], host[s][r]), 1e-4) << "step " << s << " rank " << r;
      EXPECT_LE(relative(batched[s][r], single[s][r]), 1e-4) << "step " << s << " rank " << r;
    }
}

}  // namespace
}  // namespace gradcomp
