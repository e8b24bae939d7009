// The gradient reducer: bucket plan, exact averages and reports, compressed buckets, misuse, and a
// failing peer.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>

#include "collectives/inprocess_communicator.h"
#include "core/error.h"
#include "tests/collectives/collective_test_util.h"
#include "training/gradient_reducer.h"

namespace gradcomp {
namespace {

using namespace gradcomp::testing;

ParameterLayout layoutOf(const std::vector<std::vector<size_t>>& shapes) {
  ParameterLayout l;
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::string name = "t";  // (not "t" + to_string: GCC 12's -Wrestrict false positive)
    name += std::to_string(i);
    l.add(name, shapes[i]);
  }
  return l;
}

TEST(Reducer, PlansBucketsInBackwardOrderAndKeepsSmallAnd1DTensorsUncompressed) {
  // w0 [64x64], b0 [64], w1 [64x32], b1 [32], w2 [32x10] (320 < 1024: small), b2 [10]
  const auto layout = layoutOf({{64, 64}, {64}, {64, 32}, {32}, {32, 10}, {10}});
  ReducerOptions o;
  o.compressed.codec = "int8";
  o.bucketBytes = 3000 * 4;  // w1 (2048) fits, w1 + w0 (6144) does not
  const auto plans = planBuckets(layout, o);
  // In the order backward completes them: w1; then the uncompressed b2, w2, b1, b0 (complete when b0
  // is, just before w0); then w0.
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].tensors, (std::vector<size_t>{2}));
  EXPECT_EQ(plans[1].tensors, (std::vector<size_t>{5, 4, 3, 1}));
  EXPECT_EQ(plans[2].tensors, (std::vector<size_t>{0}));
  EXPECT_FALSE(plans[1].compressed);
  EXPECT_EQ(plans[1].config.codec, "none");
  EXPECT_TRUE(plans[0].compressed);
  EXPECT_EQ(plans[0].config.codec, "int8");
  EXPECT_EQ(plans[1].offsets, (std::vector<size_t>{0, 10, 330, 362}));
  for (const auto& p : plans) EXPECT_EQ(p.config.op, ReduceOp::Average);

  o.compressOneDimensional = true;
  o.minCompressElements = 1;
  o.bucketBytes = size_t{1} << 20;
  EXPECT_EQ(planBuckets(layout, o).size(), 1u);  // everything in one compressed bucket
  o.bucketOverrides[0].codec = "fp16";
  EXPECT_EQ(planBuckets(layout, o)[0].config.codec, "fp16");
  o.bucketOverrides[3].codec = "fp16";
  EXPECT_THROW(planBuckets(layout, o), InvalidArgument);  // no bucket 3
}

TEST(Reducer, AveragesExactlyAndReportsTheBytesOfEveryBucket) {
  const auto layout = layoutOf({{40, 30}, {32}, {30, 20}, {20}});  // every bucket divisible by 4
  const int ranks = 4;
  for (const bool overlap : {true, false}) {
    runRanksOk(ranks, [&](Communicator& comm) {
      ReducerOptions o;
      o.bucketBytes = 800 * 4;
      o.minCompressElements = 100;  // w1 (600) and w0 (1200) in two buckets, the biases in a third
      o.overlap = overlap;
      GradientReducer reducer(comm, layout, o);
      ASSERT_EQ(reducer.buckets().size(), 3u);
      for (uint32_t step = 0; step < 3; ++step) {
        std::vector<float> grad = exactInput(comm.rank(), ranks, layout.totalElements());
        std::vector<float> expected = exactSum(ranks, layout.totalElements());
        for (auto& v : expected) v /= ranks;  // exact: a power of two
        reducer.beginStep(grad, step);
        for (size_t t = layout.size(); t-- > 0;) reducer.markReady(t);
        const ReducerStepReport r = reducer.wait();
        EXPECT_EQ(grad, expected);
        const uint64_t floats = layout.totalElements();
        EXPECT_EQ(r.bytesSent, 2 * (ranks - 1) * floats * 4 / ranks);
        EXPECT_EQ(r.uncompressedBytes, r.bytesSent);
        EXPECT_EQ(r.buckets, 3u);
        EXPECT_GT(r.commSeconds, 0.0);
        EXPECT_GE(r.hiddenShare(), 0.0);
        EXPECT_LE(r.hiddenShare(), 1.0);
      }
    });
  }
}

TEST(Reducer, CompressedBucketsGiveTheSameBitsOnEveryRank) {
  const auto layout = layoutOf({{100, 50}, {50}, {50, 40}});
  const int ranks = 3;
  std::vector<std::vector<float>> results(ranks);
  std::mutex mutex;
  runRanksOk(ranks, [&](Communicator& comm) {
    ReducerOptions o;
    o.compressed.codec = "sign";
    o.compressed.errorFeedback = "ef";
    GradientReducer reducer(comm, layout, o);
    std::vector<float> grad = normalInput(comm.rank(), layout.totalElements());
    reducer.beginStep(grad, 0);
    const auto r = reducer.wait();  // marks everything ready
    EXPECT_LT(r.bytesSent, r.uncompressedBytes / 8);
    std::lock_guard lock(mutex);
    results[static_cast<size_t>(comm.rank())] = grad;
  });
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

TEST(Reducer, MisuseIsAnErrorThatNamesIt) {
  const auto layout = layoutOf({{8, 8}, {8}});
  runRanksOk(1, [&](Communicator& comm) {
    GradientReducer reducer(comm, layout, ReducerOptions{});
    std::vector<float> grad(layout.totalElements()), wrong(3);
    EXPECT_THROW(reducer.markReady(0), InvalidArgument);  // before beginStep
    EXPECT_THROW(reducer.beginStep(wrong, 0), InvalidArgument);
    reducer.beginStep(grad, 0);
    reducer.markReady(1);
    try {
      reducer.markReady(1);
      FAIL();
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'t1') marked ready twice"), std::string::npos) << e.what();
    }
    EXPECT_THROW(reducer.markReady(7), InvalidArgument);
    reducer.wait();
  });
  ReducerOptions bad;
  bad.compressed.codec = "topk:ratio=0.1";  // the ring cannot carry top-k: refused when built
  runRanksOk(1, [&](Communicator& comm) { EXPECT_THROW(GradientReducer(comm, layout, bad), InvalidArgument); });
}

TEST(Reducer, APeerThatFailsMidStepFailsEveryWaitWithinTheDeadline) {
  const auto layout = layoutOf({{64, 64}, {64}});
  CommunicatorOptions co;
  co.timeoutSeconds = 5;
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = runInProcess(3, [&](Communicator& comm) {
    GradientReducer reducer(comm, layout, ReducerOptions{});
    std::vector<float> grad(layout.totalElements(), 1.0f);
    reducer.beginStep(grad, 0);
    if (comm.rank() == 1) throw std::runtime_error("worker 1 crashed in backward");
    reducer.wait();
  }, co);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  for (int r : {0, 2}) {
    ASSERT_TRUE(errors[static_cast<size_t>(r)]) << r;
    EXPECT_THROW(std::rethrow_exception(errors[static_cast<size_t>(r)]), PeerFailure);
  }
}

}  // namespace
}  // namespace gradcomp
