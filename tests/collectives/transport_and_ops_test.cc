// The transport contract (matching order, deadlines, traffic accounting, split, link-model pacing), the
// primitives besides all-reduce, check mode, error feedback across the compressed ring, predictions.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "collectives/agreement.h"
#include "collectives/allreduce.h"
#include "collectives/collective_ops.h"
#include "collectives/ring_primitives.h"
#include "tests/collectives/collective_test_util.h"

namespace gradcomp {
namespace {

using testing::exactInput;
using testing::exactSum;
using testing::normalInput;
using testing::runRanksOk;

TEST(InProcess, MessagesOfOneTagMatchInPostingOrderAndReportTheirSize) {
  runRanksOk(2, [](Communicator& comm) {
    const Tag tag = makeTag(0, 1);
    if (comm.rank() == 0) {
      const uint32_t a[3] = {1, 2, 3}, b[1] = {4};
      Request s1 = comm.isend(std::as_bytes(std::span(a)), 1, tag);
      Request s2 = comm.isend(std::as_bytes(std::span(b)), 1, tag);
      comm.wait(s1, comm.deadline(), "test");
      comm.wait(s2, comm.deadline(), "test");
    } else {
      uint32_t x[3] = {}, y[3] = {};
      Request r1 = comm.irecv(std::as_writable_bytes(std::span(x)), 0, tag);
      Request r2 = comm.irecv(std::as_writable_bytes(std::span(y)), 0, tag);
      EXPECT_EQ(comm.wait(r2, comm.deadline(), "test"), 4u);  // waited out of order: still the second
      EXPECT_EQ(comm.wait(r1, comm.deadline(), "test"), 12u);
      EXPECT_EQ(x[2], 3u);
      EXPECT_EQ(y[0], 4u);
    }
  });
}

TEST(InProcess, PeerOutsideTheCommunicatorIsRefused) {
  runRanksOk(2, [](Communicator& comm) {
    std::byte b[1];
    EXPECT_THROW(comm.isend(b, 2, 0), InvalidArgument);
    EXPECT_THROW(comm.irecv(b, comm.rank(), 0), InvalidArgument);
  });
}

TEST(Traffic, CountedPerPeerAndLinkClassAndMatchingTheRingFormula) {
  const int p = 4;
  const size_t n = 1000;  // divisible by 4: every segment is 250 floats
  CommunicatorOptions o;
  o.ranksPerNode = 2;
  runRanksOk(p, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make({});
    auto x = exactInput(comm.rank(), p, n);
    const auto report = algo->run(x, comm);
    const uint64_t expected = 2 * (p - 1) * (n / p) * sizeof(float);
    EXPECT_EQ(report.bytesSent, expected);
    const TrafficStats& t = comm.traffic();
    const int right = (comm.rank() + 1) % p, left = (comm.rank() + p - 1) % p;
    // The agreement check's Bruck rounds talk to other peers too; the ring data goes right only.
    EXPECT_GE(t.bytesSentTo(right), expected);
    EXPECT_GE(t.bytesReceivedFrom(left), expected);
    // Ranks 1 -> 2 and 3 -> 0 cross nodes {0,1} | {2,3}.
    const bool crossing = comm.node(right) != comm.node(comm.rank());
    EXPECT_EQ(report.bytesSentInter, crossing ? expected : 0u);
    EXPECT_EQ(report.bytesSentIntra, crossing ? 0u : expected);
    EXPECT_EQ(t.totalBytesSent(), t.bytesSent(LinkClass::Intra) + t.bytesSent(LinkClass::Inter));
  }, o);
}

TEST(Traffic, CompressedRingSendsTheEncodedSegments) {
  const int p = 4;
  const size_t n = 4096;
  runRanksOk(p, [&](Communicator& comm) {
    AllreduceConfig c;
    c.codec = "int8";
    auto algo = AllreduceAlgorithm::make(c);
    auto x = normalInput(comm.rank(), n);
    const auto report = algo->run(x, comm);
    const size_t segmentWire = algo->payload().maxBytes(n / p, {});  // 1024 floats: one chunk per segment
    EXPECT_EQ(report.bytesSent, 2 * (p - 1) * segmentWire);
    EXPECT_EQ(report.cost.encodes, static_cast<uint64_t>(p));  // P-1 hops + one all-gather encode
    EXPECT_GT(report.cost.encodeSeconds, 0.0);
  });
}

TEST(Split, SubCommunicatorsHaveTheirRanksAndCountIntoTheRootTraffic) {
  CommunicatorOptions o;
  o.ranksPerNode = 3;
  runRanksOk(6, [](Communicator& comm) {
    auto intra = comm.split(comm.node(comm.rank()), comm.rank());
    auto inter = comm.split(intra->rank(), comm.node(comm.rank()));
    EXPECT_EQ(intra->size(), 3);
    EXPECT_EQ(intra->rank(), comm.rank() % 3);
    EXPECT_EQ(inter->size(), 2);
    EXPECT_EQ(inter->rank(), comm.rank() / 3);
    EXPECT_EQ(inter->worldRank(1 - inter->rank()), (comm.rank() + 3) % 6);
    for (int r = 0; r < intra->size(); ++r) EXPECT_EQ(intra->linkClass(r), LinkClass::Intra);
    EXPECT_EQ(inter->linkClass(1 - inter->rank()), LinkClass::Inter);
    const uint64_t before = comm.traffic().bytesSent(LinkClass::Inter);
    auto algo = AllreduceAlgorithm::make({});
    std::vector<float> x(300, 1.0f);
    algo->run(x, *inter);
    EXPECT_EQ(x[0], 2.0f);
    // 2(P-1)/P * S with P = 2, plus one agreement descriptor.
    EXPECT_EQ(comm.traffic().bytesSent(LinkClass::Inter) - before, 300u * 4 + kAgreementDescriptorBytes);
    // Key order reverses ranks.
    auto reversed = comm.split(0, -comm.rank());
    EXPECT_EQ(reversed->rank(), 5 - comm.rank());
  }, o);
}

TEST(LinkModel, ParsesRatesAndLatenciesAndRejectsBadUnits) {
  const LinkModel m = LinkModel::parse("inter=1gbit/50us,intra=10GB/1us");
  EXPECT_DOUBLE_EQ(m.inter.bytesPerSecond, 125e6);
  EXPECT_DOUBLE_EQ(m.inter.latencySeconds, 50e-6);
  EXPECT_DOUBLE_EQ(m.intra.bytesPerSecond, 10e9);
  EXPECT_DOUBLE_EQ(m.inter.seconds(125000), 50e-6 + 1e-3);
  EXPECT_THROW(LinkModel::parse("inter=1parsec"), InvalidArgument);
  EXPECT_THROW(LinkModel::parse("outer=1gbit"), InvalidArgument);
  EXPECT_THROW(LinkModel::parse("inter=-1gbit"), InvalidArgument);
}

TEST(LinkModel, PacesDeliveryToAtLeastTheModelledTime) {
  // 2 ranks on 2 nodes, 40 MB/s and 20 ms: a 400 KB message cannot arrive in under 30 ms from the
  // moment before either rank started (the sender cannot have sent it earlier than that).
  CommunicatorOptions o;
  o.ranksPerNode = 1;
  const auto t0 = Clock::now();
  std::vector<double> done(2);
  runRanksOk(2, [&](Communicator& comm) {
    std::vector<std::byte> buf(400000);
    Request q = comm.rank() == 0 ? comm.isend(buf, 1, 7) : comm.irecv(buf, 0, 7);
    comm.wait(q, comm.deadline(), "test");
    done[static_cast<size_t>(comm.rank())] = std::chrono::duration<double>(Clock::now() - t0).count();
  }, o, LinkModel::parse("inter=40MB/20ms"));
  EXPECT_GE(done[0], 0.010);  // the bytes have left the sender's egress
  EXPECT_GE(done[1], 0.030);  // and arrived
}

TEST(LinkModel, AMessageSlowerThanTheDeadlineTimesOut) {
  CommunicatorOptions o;
  o.ranksPerNode = 1;
  o.timeoutSeconds = 0.05;
  const auto errors = runInProcess(2, [](Communicator& comm) {
    std::vector<std::byte> buf(1000000);
    Request q = comm.rank() == 0 ? comm.isend(buf, 1, 7) : comm.irecv(buf, 0, 7);
    comm.wait(q, comm.deadline(), "slow link");
  }, o, LinkModel::parse("inter=1MB"));
  for (const auto& e : errors) EXPECT_NE(testing::messageOf(e).find("slow link"), std::string::npos);
}

class PrimitiveWorlds : public ::testing::TestWithParam<int> {};

TEST_P(PrimitiveWorlds, ReduceScatterAllGatherBroadcastAllToAllAreExact) {
  const int p = GetParam();
  const size_t n = 1003;
  runRanksOk(p, [&](Communicator& comm) {
    CollectiveOps ops({});
    const int r = comm.rank();
    const Segments seg{n, static_cast<size_t>(p)};
    const auto input = exactInput(r, p, n);
    const auto sum = exactSum(p, n);

    std::vector<float> mine(seg.size(static_cast<size_t>(r)));
    ops.reduceScatter(input, mine, comm);
    for (size_t i = 0; i < mine.size(); ++i) ASSERT_EQ(mine[i], sum[seg.begin(static_cast<size_t>(r)) + i]);

    std::vector<float> block(17), all(17 * static_cast<size_t>(p));
    for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<float>(r * 100 + static_cast<int>(i));
    ops.allGather(block, all, comm);
    for (int q = 0; q < p; ++q)
      for (size_t i = 0; i < 17; ++i) ASSERT_EQ(all[static_cast<size_t>(q) * 17 + i], q * 100 + static_cast<int>(i));

    for (int root = 0; root < p; ++root) {
      auto x = r == root ? exactInput(root, p, n) : std::vector<float>(n, -1.0f);
      ops.broadcast(x, root, comm);
      ASSERT_EQ(x, exactInput(root, p, n)) << "root " << root;
    }

    const size_t m = 5;
    std::vector<float> send(m * static_cast<size_t>(p)), recv(send.size());
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(r * 1000 + static_cast<int>(i));
    ops.allToAll(send, recv, comm);
    for (int q = 0; q < p; ++q)
      for (size_t i = 0; i < m; ++i)
        ASSERT_EQ(recv[static_cast<size_t>(q) * m + i], q * 1000 + r * static_cast<int>(m) + static_cast<int>(i));
  });
}

TEST_P(PrimitiveWorlds, WithACodecEveryRankHoldsTheSameDecodedValues) {
  const int p = GetParam();
  const size_t n = 4000;
  std::vector<std::vector<float>> gathered(static_cast<size_t>(p)), broadcasted(static_cast<size_t>(p));
  runRanksOk(p, [&](Communicator& comm) {
    CollectiveConfig c;
    c.codec = "fp16";
    CollectiveOps ops(c);
    const auto x = normalInput(comm.rank(), n);
    std::vector<float> all(n * static_cast<size_t>(p));
    ops.allGather(x, all, comm);
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(all[static_cast<size_t>(comm.rank()) * n + i], x[i], 2e-3 * std::abs(x[i]) + 1e-7);
    gathered[static_cast<size_t>(comm.rank())] = all;
    auto b = normalInput(p - 1, n);
    ops.broadcast(b, p - 1, comm);
    broadcasted[static_cast<size_t>(comm.rank())] = b;

    const Segments seg{n, static_cast<size_t>(p)};
    std::vector<float> mine(seg.size(static_cast<size_t>(comm.rank())));
    ops.reduceScatter(x, mine, comm);
    std::vector<double> exact(mine.size(), 0.0);
    for (int q = 0; q < p; ++q) {
      const auto xq = normalInput(q, n);
      for (size_t i = 0; i < mine.size(); ++i) exact[i] += xq[seg.begin(static_cast<size_t>(comm.rank())) + i];
    }
    EXPECT_LE(testing::relativeError(mine, exact), 2e-3);

    std::vector<float> a2a(n - n % static_cast<size_t>(p)), out(a2a.size());
    std::copy_n(x.begin(), a2a.size(), a2a.begin());
    ops.allToAll(a2a, out, comm);
  });
  for (int r = 1; r < p; ++r) {
    EXPECT_EQ(gathered[0], gathered[static_cast<size_t>(r)]);
    EXPECT_EQ(broadcasted[0], broadcasted[static_cast<size_t>(r)]);
  }
}

INSTANTIATE_TEST_SUITE_P(Collectives, PrimitiveWorlds, ::testing::Values(1, 2, 3, 4, 5, 7, 8));

TEST(Primitives, BadArgumentsAreRefused) {
  runRanksOk(2, [](Communicator& comm) {
    CollectiveOps ops({});
    std::vector<float> x(10), y(3);
    EXPECT_THROW(ops.reduceScatter(x, y, comm), InvalidArgument);
    EXPECT_THROW(ops.allGather(x, y, comm), InvalidArgument);
    EXPECT_THROW(ops.broadcast(x, 2, comm), InvalidArgument);
    std::vector<float> odd(5), out(5);
    EXPECT_THROW(ops.allToAll(odd, out, comm), InvalidArgument);
  });
  CollectiveConfig c;
  c.errorFeedback = "ef21";
  EXPECT_THROW(CollectiveOps{c}, InvalidArgument);
}

TEST(CheckMode, ReportsZeroForLosslessAndTheRealErrorForLossy) {
  runRanksOk(4, [](Communicator& comm) {
    auto exact = AllreduceAlgorithm::make({});
    auto x = exactInput(comm.rank(), 4, 1000);
    const uint64_t before = comm.traffic().totalBytesSent();
    const auto r1 = exact->run(x, comm, {0, 0, true});
    EXPECT_EQ(r1.relativeError, 0.0);
    EXPECT_EQ(r1.bytesSent, 2u * 3 * (1000 / 4) * 4);
    EXPECT_EQ(comm.traffic().totalBytesSent() - before, r1.bytesSent + r1.controlBytesSent);  // check not counted
    AllreduceConfig c;
    c.codec = "fp8-e4m3";
    auto lossy = AllreduceAlgorithm::make(c);
    auto y = normalInput(comm.rank(), 4000);
    const auto r2 = lossy->run(y, comm, {0, 0, true});
    EXPECT_GT(r2.relativeError, 1e-3);
    EXPECT_LT(r2.relativeError, 0.2);
  });
}

TEST(Average, DividesByTheWorldSizeIdenticallyOnEveryRank) {
  std::vector<std::vector<float>> out(3);
  runRanksOk(3, [&](Communicator& comm) {
    AllreduceConfig c;
    c.op = ReduceOp::Average;
    auto algo = AllreduceAlgorithm::make(c);
    auto x = exactInput(comm.rank(), 3, 100);
    algo->run(x, comm);
    out[static_cast<size_t>(comm.rank())] = x;
  });
  const auto sum = exactSum(3, 100);
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(out[0][i], sum[i] / 3.0f);
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(out[0], out[2]);
}

// Over T steps of the compressed ring with ef, every compression error stays in some rank's residual:
// sum_t result_t == sum_t exact_t - sum_r residual_r(T) (up to fp32 rounding), so nothing is lost.
TEST(ErrorFeedback, CompressedRingLosesNothingAcrossSteps) {
  const int p = 4, steps = 20;
  const size_t n = 2048;
  std::vector<std::vector<double>> resultSum(p, std::vector<double>(n, 0.0));
  std::vector<std::vector<double>> residual(p, std::vector<double>(n, 0.0));
  runRanksOk(p, [&](Communicator& comm) {
    AllreduceConfig c;
    c.codec = "sign";
    c.errorFeedback = "ef";
    c.chunkBytes = 1024;  // 256-element chunks: the residual slices of many chunks must tile the tensor
    auto algo = AllreduceAlgorithm::make(c);
    for (int t = 0; t < steps; ++t) {
      auto x = normalInput(comm.rank() * 100 + t, n);
      algo->run(x, comm, {1, static_cast<uint32_t>(t), false});
      for (size_t i = 0; i < n; ++i) resultSum[static_cast<size_t>(comm.rank())][i] += x[i];
    }
    // One residual per tensor and rank, covering every chunk this rank encoded.
    const auto e = algo->errorFeedback().stateBuffer(1, 0);
    ASSERT_EQ(e.size(), n);
    for (size_t i = 0; i < n; ++i) residual[static_cast<size_t>(comm.rank())][i] = e[i];
  });
  std::vector<double> exact(n, 0.0), lost(n, 0.0);
  for (int r = 0; r < p; ++r)
    for (int t = 0; t < steps; ++t) {
      const auto x = normalInput(r * 100 + t, n);
      for (size_t i = 0; i < n; ++i) exact[i] += x[i];
    }
  double worst = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    double res = 0;
    for (int r = 0; r < p; ++r) res += residual[static_cast<size_t>(r)][i];
    worst = std::max(worst, std::abs(resultSum[0][i] - (exact[i] - res)));
    scale = std::max(scale, std::abs(exact[i]));
  }
  EXPECT_LE(worst, 1e-4 * scale);
  // Without the residual the same comparison is off by a lot: the check is not vacuous.
  double plain = 0;
  for (size_t i = 0; i < n; ++i) plain = std::max(plain, std::abs(resultSum[0][i] - exact[i]));
  EXPECT_GT(plain, 100 * worst + 1e-3);
}

TEST(Predict, FollowsTheDocumentedFormulas) {
  const LinkModel links = LinkModel::parse("inter=1GB/10us,intra=10GB/1us");
  const size_t n = 1 << 20;  // 4 MiB
  auto ring = AllreduceAlgorithm::make({});
  EXPECT_NEAR(ring->predictSeconds(n, 8, 1, links), 14 * (10e-6 + 4.0 * n / 8 / 1e9), 1e-12);
  EXPECT_EQ(ring->predictSeconds(n, 1, 1, links), 0.0);
  AllreduceConfig t;
  t.algorithm = "tree";
  EXPECT_NEAR(AllreduceAlgorithm::make(t)->predictSeconds(n, 8, 1, links), 3 * (10e-6 + 4.0 * n / 1e9), 1e-12);
  AllreduceConfig h;
  h.algorithm = "hierarchical";
  const double intra = 2 * 3 * (1e-6 + 4.0 * n / 4 / 10e9), inter = 2 * 1 * (10e-6 + 4.0 * n / 4 / 2 / 1e9);
  EXPECT_NEAR(AllreduceAlgorithm::make(h)->predictSeconds(n, 8, 4, links), intra + inter, 1e-12);
  AllreduceConfig c;
  c.codec = "int8";
  EXPECT_LT(AllreduceAlgorithm::make(c)->predictSeconds(n, 8, 1, links), 0.3 * ring->predictSeconds(n, 8, 1, links));
}

}  // namespace
}  // namespace gradcomp
