// Never hang, never silently corrupt (docs/reliability.md rows 16, 17, 20, 21, 22 and 7 for collectives):
// agreement mismatches, deadlines, dead / stopped / slow peers, misordered and skipped operations,
// corrupted and truncated payloads, non-finite inputs.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "collectives/allreduce.h"
#include "collectives/collective_ops.h"
#include "tests/collectives/collective_test_util.h"

namespace gradcomp {
namespace {

using testing::isA;
using testing::messageOf;
using testing::normalInput;

// Runs the all-reduce and records how long it took to succeed or fail in `elapsed[rank]`.
void timedRun(AllreduceAlgorithm& algo, std::span<float> x, Communicator& comm, std::vector<double>& elapsed) {
  const auto t0 = Clock::now();
  try {
    algo.run(x, comm);
  } catch (...) {
    elapsed[static_cast<size_t>(comm.rank())] = std::chrono::duration<double>(Clock::now() - t0).count();
    throw;
  }
}

AllreduceConfig config(const char* algorithm, const char* codec = "none", const char* ef = "none") {
  return testing::allreduceConfig(algorithm, codec, ef);
}

using testing::withTimeout;

TEST(Agreement, CountMismatchIsAnErrorOnEveryRankNamingBothValues) {
  const auto errors = runInProcess(4, [](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(config("ring"));
    std::vector<float> x(comm.rank() == 2 ? 999 : 1000, 1.0f);
    algo->run(x, comm);
  }, withTimeout(10));
  for (const auto& e : errors) {
    ASSERT_TRUE(e && isA<CollectiveMismatch>(e)) << messageOf(e);
    EXPECT_NE(messageOf(e).find("count=1000"), std::string::npos) << messageOf(e);
    EXPECT_NE(messageOf(e).find("rank 2 has all-reduce #0 count=999"), std::string::npos) << messageOf(e);
  }
}

TEST(Agreement, CodecMismatchIsAnErrorOnEveryRank) {
  const auto errors = runInProcess(3, [](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(config("ring", comm.rank() == 1 ? "fp16" : "int8"));
    std::vector<float> x(100, 1.0f);
    algo->run(x, comm);
  }, withTimeout(10));
  for (const auto& e : errors) {
    ASSERT_TRUE(e && isA<CollectiveMismatch>(e)) << messageOf(e);
    EXPECT_NE(messageOf(e).find("codec=fp16"), std::string::npos);
    EXPECT_NE(messageOf(e).find("codec=int8"), std::string::npos);
  }
}

TEST(Agreement, OperationsInADifferentOrderAreAnError) {
  const auto errors = runInProcess(2, [](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(config("ring"));
    CollectiveOps ops({});
    std::vector<float> x(64, 1.0f);
    if (comm.rank() == 0) {
      algo->run(x, comm);
      ops.broadcast(x, 0, comm);
    } else {
      ops.broadcast(x, 0, comm);
      algo->run(x, comm);
    }
  }, withTimeout(10));
  for (const auto& e : errors) {
    ASSERT_TRUE(e && isA<CollectiveMismatch>(e)) << messageOf(e);
    EXPECT_NE(messageOf(e).find("broadcast #0"), std::string::npos) << messageOf(e);
  }
}

TEST(Deadline, SkippedOperationTimesOutNamingTheSequenceNumber) {
  const double deadline = 0.3;
  std::vector<double> elapsed(3);
  const auto errors = runInProcess(3, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(config("ring"));
    std::vector<float> x(100, 1.0f);
    algo->run(x, comm);
    if (comm.rank() == 1) return;  // skips operation #1
    timedRun(*algo, x, comm, elapsed);
  }, withTimeout(deadline));
  EXPECT_FALSE(errors[1]);
  for (int r : {0, 2}) {
    const auto& e = errors[static_cast<size_t>(r)];
    ASSERT_TRUE(e && isA<TimeoutError>(e)) << messageOf(e);
    EXPECT_NE(messageOf(e).find("operation #1"), std::string::npos) << messageOf(e);
    EXPECT_NE(messageOf(e).find("rank 1"), std::string::npos) << messageOf(e);
    EXPECT_GE(elapsed[static_cast<size_t>(r)], deadline);
    EXPECT_LT(elapsed[static_cast<size_t>(r)], 2 * deadline);
  }
}

TEST(Deadline, DeadPeerFailsSurvivorsNamingThePeer) {
  const double deadline = 5.0;
  std::vector<double> elapsed(4);
  const auto errors = runInProcess(4, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(config("ring", "int8"));
    auto x = normalInput(comm.rank(), 10000);
    if (comm.rank() == 3) throw std::runtime_error("rank 3 crashed");
    timedRun(*algo, x, comm, elapsed);
  }, withTimeout(deadline));
  // Rank 3's neighbours learn at once; the others time out or fail through them, never later than 2x.
  for (int r = 0; r < 3; ++r) {
    const auto& e = errors[static_cast<size_t>(r)];
    ASSERT_TRUE(e && (isA<PeerFailure>(e) || isA<TimeoutError>(e))) << messageOf(e);
    EXPECT_NE(messageOf(e).find("rank "), std::string::npos);
    EXPECT_LT(elapsed[static_cast<size_t>(r)], 2 * deadline);
  }
  const std::string& m = messageOf(errors[2]);  // rank 2 receives from rank 1 in the agreement rounds
  EXPECT_TRUE(m.find("rank 3") != std::string::npos || m.find("rank 1") != std::string::npos) << m;
  EXPECT_TRUE(isA<PeerFailure>(errors[0]) || isA<PeerFailure>(errors[2]));
}

TEST(Deadline, StoppedPeerTimesOutAndAShorterDelaySucceeds) {
  const double deadline = 0.4;
  for (const double delay : {0.1, 1.0}) {
    std::vector<double> elapsed(3);
    const auto errors = runInProcess(3, [&](Communicator& comm) {
      auto algo = AllreduceAlgorithm::make(config("ring", "fp16"));
      auto x = normalInput(comm.rank(), 5000);
      if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
      timedRun(*algo, x, comm, elapsed);
    }, withTimeout(deadline));
    if (delay < deadline) {
      for (const auto& e : errors) EXPECT_FALSE(e) << messageOf(e);
      continue;
    }
    for (int r : {1, 2}) {
      const auto& e = errors[static_cast<size_t>(r)];
      ASSERT_TRUE(e && isA<TimeoutError>(e)) << messageOf(e);
      EXPECT_GE(elapsed[static_cast<size_t>(r)], deadline);
      EXPECT_LT(elapsed[static_cast<size_t>(r)], 2 * deadline);
    }
  }
}

TEST(Payloads, TruncatedOrCorruptedBytesFromAPeerAreDecodeErrors) {
  for (const bool truncate : {true, false}) {
    const auto errors = runInProcess(3, [&](Communicator& inner) {
      testing::FaultyCommunicator comm(inner, [&](std::vector<std::byte>& m, int, Tag tag) {
        if (inner.rank() != 1 || (tag & 0xFF) == 0 || m.size() < 64) return;  // leave the agreement alone
        if (truncate) m.resize(m.size() - 8);
        else m[20] ^= std::byte{0x40};  // inside the header: the checksum catches it
      });
      auto algo = AllreduceAlgorithm::make(config("ring", "int8"));
      auto x = normalInput(comm.rank(), 3000);
      algo->run(x, comm);
    }, withTimeout(2));
    // Rank 2 receives rank 1's payload first and must reject it (no crash, no silent sum).
    ASSERT_TRUE(errors[2] && isA<DecodeError>(errors[2])) << messageOf(errors[2]);
  }
}

TEST(Payloads, ExtraBytesFromAPeerAreATransportError) {
  const auto errors = runInProcess(2, [&](Communicator& inner) {
    testing::FaultyCommunicator comm(inner, [&](std::vector<std::byte>& m, int, Tag tag) {
      if (inner.rank() == 0 && (tag & 0xFF) != 0) m.resize(m.size() + 4096);
    });
    auto algo = AllreduceAlgorithm::make(config("ring"));
    std::vector<float> x(1000, 1.0f);
    algo->run(x, comm);
  }, withTimeout(2));
  ASSERT_TRUE(errors[1] && isA<TransportError>(errors[1])) << messageOf(errors[1]);
}

TEST(NonFinite, NanOnOneRankIsTheSameErrorOnEveryRank) {
  const auto errors = runInProcess(4, [](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(config("ring", "int8", "ef"));
    auto x = normalInput(comm.rank(), 1000);
    if (comm.rank() == 2) x[777] = std::numeric_limits<float>::quiet_NaN();
    algo->run(x, comm, {9, 0, false});
  }, withTimeout(10));
  for (const auto& e : errors) {
    ASSERT_TRUE(e && isA<NonFiniteError>(e)) << messageOf(e);
    EXPECT_NE(messageOf(e).find("rank 2 has a non-finite gradient at index 777 of tensor 9"), std::string::npos)
        << messageOf(e);
  }
}

TEST(NonFinite, SkipPolicyDropsTheRankOnEveryRankAndLeavesItsResidual) {
  std::vector<std::vector<float>> out(3);
  testing::runRanksOk(3, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(config("allgather", "none", "ef:nonfinite=skip"));
    std::vector<float> x(10, static_cast<float>(comm.rank() + 1));
    if (comm.rank() == 0) x[0] = std::numeric_limits<float>::infinity();
    const auto report = algo->run(x, comm);
    EXPECT_EQ(report.skippedNonFinite, comm.rank() == 0 ? 1u : 0u);
    out[static_cast<size_t>(comm.rank())] = x;
  });
  for (const auto& x : out)
    for (float v : x) EXPECT_EQ(v, 5.0f);  // ranks 1 and 2 only: 2 + 3
}

TEST(Config, UnsupportedPairsAreRefusedAtConstructionNamingBoth) {
  auto refused = [](AllreduceConfig c, const char* a, const char* b) {
    try {
      AllreduceAlgorithm::make(c);
      ADD_FAILURE() << "accepted " << c.algorithm << " + " << c.codec << " + " << c.errorFeedback;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(a), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(b), std::string::npos) << e.what();
    }
  };
  refused(config("ring", "topk:ratio=0.01"), "'ring'", "'topk:ratio=0.01'");
  refused(config("tree", "threshold:ratio=0.01"), "'tree'", "'threshold");
  refused(config("vendor", "int8"), "'vendor'", "'int8'");
  refused(config("randomk", "int8"), "'randomk'", "'int8'");
  refused(config("ring", "int8", "ef21"), "'ring'", "'ef21'");
  refused(config("ring", "int8", "dgc"), "'ring'", "'dgc'");
  refused(config("butterfly"), "'butterfly'", "known:");
  AllreduceConfig c = config("ring");
  c.chunkBytes = 0;
  refused(c, "chunk", "4 bytes");
  EXPECT_THROW(InProcessWorld::create(2, withTimeout(-1)), InvalidArgument);
  EXPECT_THROW(InProcessWorld::create(0), InvalidArgument);
}

TEST(Config, VendorNeedsATransportThatHasOne) {
  const auto errors = runInProcess(2, [](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(config("vendor"));
    std::vector<float> x(10, 1.0f);
    algo->run(x, comm);
  }, withTimeout(5));
  for (const auto& e : errors) ASSERT_TRUE(e && isA<BackendUnavailable>(e)) << messageOf(e);
}

TEST(Config, HierarchicalRefusesUnevenNodes) {
  CommunicatorOptions o = withTimeout(5);
  o.ranksPerNode = 2;  // 5 ranks: nodes of 2, 2, 1
  const auto errors = runInProcess(5, [](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(config("hierarchical"));
    std::vector<float> x(10, 1.0f);
    algo->run(x, comm);
  }, o);
  for (const auto& e : errors) {
    ASSERT_TRUE(e && isA<InvalidArgument>(e)) << messageOf(e);
    EXPECT_NE(messageOf(e).find("node 2: 1"), std::string::npos) << messageOf(e);
  }
}

#ifndef GRADCOMP_HAVE_CUDA
// Only in builds without CUDA (with CUDA the host-staging path runs instead, in tests/cuda/).
TEST(Config, CudaBuffersWithoutCudaAreAClearError) {
  const auto errors = runInProcess(1, [](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(config("ring"));
    std::vector<float> x(10, 1.0f);
    ExecContext gpu;
    gpu.device = Device::Cuda;
    algo->run(x, comm, {}, gpu);
  });
  ASSERT_TRUE(errors[0] && isA<BackendUnavailable>(errors[0])) << messageOf(errors[0]);
}
#endif

}  // namespace
}  // namespace gradcomp
