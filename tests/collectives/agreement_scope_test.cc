// What ranks must agree on before data moves, and who may use a communicator when (docs/reliability.md
// rows 16 and 17): tensor id, step, pipeline chunk size and node layout are compared (a rank configured
// differently fails at once rather than leaving its peers to time out), codec configurations in canonical
// form (equivalent spellings agree), and a second thread starting an operation on a busy communicator is
// refused -- before this, two threads on one communicator summed equal-sized tensors crosswise.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "collectives/allreduce.h"
#include "collectives/collective_ops.h"
#include "compressors/error_feedback.h"
#include "compressors/registry.h"
#include "tests/collectives/collective_test_util.h"

namespace gradcomp {
namespace {

using testing::exactInput;
using testing::exactSum;
using testing::isA;
using testing::messageOf;

AllreduceConfig ring(const std::string& codec = "none") { return testing::allreduceConfig("ring", codec); }

CommunicatorOptions deadline(double seconds) { return testing::withTimeout(seconds); }

// Every rank fails with CollectiveMismatch mentioning `text`, well before the deadline (10 s).
void expectMismatchAtOnce(int ranks, const std::function<void(Communicator&)>& fn, const std::string& text) {
  const auto t0 = Clock::now();
  const auto errors = runInProcess(ranks, fn, deadline(10));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0) << "a rank waited for the deadline";
  for (const auto& e : errors) {
    ASSERT_TRUE(e && isA<CollectiveMismatch>(e)) << messageOf(e);
    EXPECT_NE(messageOf(e).find(text), std::string::npos) << messageOf(e);
  }
}

TEST(Agreement, TensorIdAndStepAreCompared) {
  expectMismatchAtOnce(3, [](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(ring());
    std::vector<float> x(100, 1.0f);
    algo->run(x, comm, {comm.rank() == 2 ? 8u : 7u, 0, false});
  }, "tensor=8");
  expectMismatchAtOnce(2, [](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(ring());
    std::vector<float> x(100, 1.0f);
    algo->run(x, comm, {7, comm.rank() == 1 ? 4u : 3u, false});
  }, "step=4");
}

TEST(Agreement, AnotherPipelineChunkSizeFailsAtOnce) {
  // Before, the agreement did not cover the chunk size: the ranks exchanged differently cut messages
  // and the peers waited for the full deadline.
  expectMismatchAtOnce(3, [](Communicator& comm) {
    AllreduceConfig c = ring();
    if (comm.rank() == 1) c.chunkBytes = 4096;
    auto algo = AllreduceAlgorithm::make(c);
    std::vector<float> x(100000, 1.0f);
    algo->run(x, comm);
  }, "chunk=4096");
  expectMismatchAtOnce(2, [](Communicator& comm) {
    CollectiveConfig c;
    if (comm.rank() == 0) c.chunkBytes = 8192;
    CollectiveOps ops(c);
    std::vector<float> x(1000, 1.0f), out(500);
    ops.reduceScatter(x, out, comm);
  }, "chunk=8192");
}

TEST(Agreement, EquivalentCodecSpellingsAgreeAndDifferentSettingsDoNot) {
  // Before, the raw spec text was compared: "int8" and "int8:block=256" were refused as a mismatch.
  std::vector<std::vector<float>> results(3);
  testing::runRanksOk(3, [&](Communicator& comm) {
    const char* spellings[] = {"int8", "int8:block=256", "int8:rounding=nearest,block=0256"};
    AllreduceConfig c = ring(spellings[comm.rank()]);
    c.errorFeedback = comm.rank() == 1 ? "ef:limit=1e30" : "ef";
    auto algo = AllreduceAlgorithm::make(c);
    auto x = testing::normalInput(comm.rank(), 1000);
    algo->run(x, comm);
    results[static_cast<size_t>(comm.rank())] = x;
  });
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
  expectMismatchAtOnce(2, [](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(ring(comm.rank() == 0 ? "int8" : "int8:block=128"));
    std::vector<float> x(1000, 1.0f);
    algo->run(x, comm);
  }, "int8:block=128,rounding=nearest");
}

TEST(CanonicalSpec, DefaultsAreFilledInAndValuesNormalized) {
  EXPECT_EQ(makeCompressor("int8")->canonicalSpec(), "int8:block=256,rounding=nearest");
  EXPECT_EQ(makeCompressor("int8:block=0256")->canonicalSpec(), "int8:block=256,rounding=nearest");
  EXPECT_EQ(makeCompressor("fp16")->canonicalSpec(), "fp16:prescale=1");
  EXPECT_EQ(makeCompressor("fp16:prescale=0.1250")->canonicalSpec(), "fp16:prescale=0.125");
  EXPECT_EQ(makeCompressor("randomk:k=3,unbiased=1")->canonicalSpec(),
            makeCompressor("randomk:unbiased=true,k=3")->canonicalSpec());
  EXPECT_NE(makeCompressor("topk:k=3")->canonicalSpec(), makeCompressor("topk:k=4")->canonicalSpec());
  EXPECT_EQ(ErrorFeedback::make("ef")->canonicalSpec(), ErrorFeedback::make("ef:nonfinite=error")->canonicalSpec());
  EXPECT_NE(ErrorFeedback::make("ef")->canonicalSpec(), ErrorFeedback::make("ef:nonfinite=skip")->canonicalSpec());
}

TEST(ConcurrentUse, ASecondThreadOnABusyCommunicatorIsRefusedAndTheFirstCompletes) {
  // Rank 0's first thread starts an all-reduce that waits for rank 1 (still asleep); its second thread
  // then starts another one on the same communicator and must be refused at once, naming both.
  std::exception_ptr second;
  double secondSeconds = -1;
  std::vector<std::vector<float>> results(2);
  testing::runRanksOk(2, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(ring());
    auto x = exactInput(comm.rank(), 2, 1000);
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      algo->run(x, comm, {1, 0, false});
    } else {
      std::thread other([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        auto secondAlgo = AllreduceAlgorithm::make(ring());
        auto y = exactInput(0, 2, 1000);
        const auto t0 = Clock::now();
        try {
          secondAlgo->run(y, comm, {2, 0, false});
        } catch (...) {
          second = std::current_exception();
        }
        secondSeconds = std::chrono::duration<double>(Clock::now() - t0).count();
      });
      algo->run(x, comm, {1, 0, false});
      other.join();
    }
    results[static_cast<size_t>(comm.rank())] = x;
  }, deadline(10));
  ASSERT_TRUE(second && isA<ConcurrentUse>(second)) << messageOf(second);
  EXPECT_LT(secondSeconds, 0.1);
  EXPECT_NE(messageOf(second).find("while another thread is running all-reduce"), std::string::npos) << messageOf(second);
  EXPECT_EQ(results[0], exactSum(2, 1000));  // the operation that held the communicator is unharmed
  EXPECT_EQ(results[1], exactSum(2, 1000));
}

TEST(ConcurrentUse, TwoThreadsPerRankNeverGetACrosswiseSum) {
  // The review's reproduction: per rank two threads each run 20 all-reduces of equal-sized tensors on
  // one communicator. Before, 16-20 of 20 sums were wrong with no error. Now every operation either
  // gives its exact sum or fails (ConcurrentUse where the threads overlapped; its peer then fails too:
  // mismatch or deadline); a wrong sum is never returned.
  constexpr int kOps = 20;
  constexpr size_t kN = 4096;
  std::atomic<int> wrong{0}, correct{0}, failed{0};
  runInProcess(2, [&](Communicator& comm) {
    auto body = [&](uint32_t thread) {
      auto algo = AllreduceAlgorithm::make(ring());
      for (int i = 0; i < kOps; ++i) {
        // Values distinct per (thread, rank): a crosswise sum cannot equal the right one.
        std::vector<float> x(kN), want(kN);
        for (size_t j = 0; j < kN; ++j) {
          x[j] = static_cast<float>((thread + 1) * 1000 + comm.rank() * 100 + i) + static_cast<float>(j % 7);
          want[j] = static_cast<float>(2 * (thread + 1) * 1000 + 100 + 2 * i) + 2.0f * static_cast<float>(j % 7);
        }
        try {
          algo->run(x, comm, {thread, static_cast<uint32_t>(i), false});
        } catch (const Error&) {
          ++failed;
          return;  // the communicator is dead after an error
        }
        (x == want ? correct : wrong)++;
      }
    };
    std::thread second(body, 1u);
    body(0);
    second.join();
  }, deadline(1));
  EXPECT_EQ(wrong.load(), 0) << correct.load() << " correct, " << failed.load() << " failed";
  EXPECT_GT(failed.load() + correct.load(), 0);
}

TEST(ConcurrentUse, HandingACommunicatorToAnotherThreadBetweenOperationsIsFine) {
  testing::runRanksOk(2, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(ring());
    for (int i = 0; i < 4; ++i) {
      auto x = exactInput(comm.rank(), 2, 100);
      std::thread t([&] { algo->run(x, comm, {0, static_cast<uint32_t>(i), false}); });
      t.join();
      ASSERT_EQ(x, exactSum(2, 100));
    }
  });
}

TEST(Config, HierarchicalWithACodecOnOneNodeIsRefused) {
  // Before, hierarchical on a single node silently sent uncompressed data although a codec was asked for.
  AllreduceConfig c;
  c.algorithm = "hierarchical";
  c.codec = "int8";
  const auto errors = runInProcess(4, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(c);
    std::vector<float> x(1000, 1.0f);
    algo->run(x, comm);
  }, deadline(10));
  for (const auto& e : errors) {
    ASSERT_TRUE(e && isA<InvalidArgument>(e)) << messageOf(e);
    EXPECT_NE(messageOf(e).find("all on one node: codec 'int8' would never run"), std::string::npos) << messageOf(e);
  }
  // Two nodes of two: it compresses between them.
  CommunicatorOptions twoNodes = deadline(10);
  twoNodes.ranksPerNode = 2;
  testing::runRanksOk(4, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(c);
    std::vector<float> x(1000, 1.0f);
    const AllreduceReport r = algo->run(x, comm);
    EXPECT_GT(r.cost.encodes, 0u);
  }, twoNodes);
}

}  // namespace
}  // namespace gradcomp
