// The cost model's arithmetic and the `auto` choice.
#include <gtest/gtest.h>

#include "core/error.h"
#include "collectives/algorithm_registry.h"
#include "collectives/cost_model.h"
#include "collectives/payload_codec.h"

namespace gradcomp {
namespace {

AllreduceConfig cfg(const char* algorithm, const char* codec = "none") {
  AllreduceConfig c;
  c.algorithm = algorithm;
  c.codec = codec;
  return c;
}

TEST(CostModel, ExposedCommunicationAndEfficiencyFollowTheFormula) {
  const Topology t{4, 1, LinkModel::parse("inter=1GB/0us")};
  const size_t n = 1 << 20;  // 4 MiB: ring wire 2 * 3/4 * 4 MiB / 1 GB/s = 6.29 ms
  auto ring = AllreduceAlgorithm::make(cfg("ring"));
  const Prediction p = predict(*ring, {}, n, t, 0.006, 0.5);
  EXPECT_NEAR(p.wireSeconds, 6.0 * 4.0 * n / 4 / 1e9, 1e-12);
  EXPECT_EQ(p.codecSeconds, 0.0);
  EXPECT_NEAR(p.exposedSeconds, p.allreduceSeconds - 0.003, 1e-12);
  EXPECT_NEAR(p.efficiency, 0.006 / (0.006 + p.exposedSeconds), 1e-12);
  EXPECT_EQ(predict(*ring, {}, n, t, 1.0, 0.5).exposedSeconds, 0.0);  // fully hidden
  EXPECT_THROW(predict(*ring, {}, n, t, 1.0, 1.5), InvalidArgument);
}

TEST(CostModel, CodecWorkIsChargedAtTheCodecSpeed) {
  const Topology t{4, 1, LinkModel::parse("inter=1GB")};
  const size_t n = 4000;
  const CodecSpeed speed{1e-9, 2e-9};
  auto ring = AllreduceAlgorithm::make(cfg("ring", "int8"));
  const auto w = ring->codecWork(n, 4, 1);
  EXPECT_DOUBLE_EQ(w.encodeElements, 4000);       // every segment encoded once
  EXPECT_DOUBLE_EQ(w.decodeElements, 1000 * 7);   // 3 hops + 3 all-gather + own
  EXPECT_NEAR(predict(*ring, speed, n, t, 0, 0).codecSeconds, 4000e-9 + 7000 * 2e-9, 1e-15);
  auto gather = AllreduceAlgorithm::make(cfg("allgather", "sign"));
  EXPECT_DOUBLE_EQ(gather->codecWork(n, 4, 1).decodeElements, 16000);  // P payloads
  EXPECT_DOUBLE_EQ(AllreduceAlgorithm::make(cfg("ring"))->codecWork(n, 4, 1).encodeElements, 0);
}

// The compressed ring sums a rotated codec in the rotated domain: its hops encode and decode the codec less
// its rotation, and each rank rotates the tensor forward, the sum back and (with ef) the residual back.
// The model charges that work at the unrotated speeds plus the rotation's; given only the rotated codec's
// speeds (rotateSecondsPerElement 0), it charges those, as before. allgather carries the rotated codec.
TEST(CostModel, TheRotatedRingIsChargedItsHopsWithoutRotationPlusItsOwnRotations) {
  const Topology t{4, 1, LinkModel::parse("inter=1GB")};
  const size_t n = 4000;
  const CodecSpeed speed{5e-9, 6e-9, 1e-9, 2e-9, 3e-9};
  for (const char* ef : {"none", "ef"}) {
    SCOPED_TRACE(ef);
    AllreduceConfig c = cfg("ring", "int4:rotate=hadamard");
    c.errorFeedback = ef;
    auto ring = AllreduceAlgorithm::make(c);
    const auto w = ring->codecWork(n, 4, 1);
    const double rotations = std::string(ef) == "ef" ? 3 : 2;
    EXPECT_TRUE(w.withoutRotation);
    EXPECT_DOUBLE_EQ(w.encodeElements, 4000);
    EXPECT_DOUBLE_EQ(w.decodeElements, 7000);
    EXPECT_DOUBLE_EQ(w.rotateElements, rotations * 4000);
    EXPECT_NEAR(predict(*ring, speed, n, t, 0, 0).codecSeconds, 4000e-9 + 7000 * 2e-9 + rotations * 4000 * 3e-9, 1e-15);
    EXPECT_NEAR(predict(*ring, {5e-9, 6e-9}, n, t, 0, 0).codecSeconds, 4000 * 5e-9 + 7000 * 6e-9, 1e-15);
  }
  auto gather = AllreduceAlgorithm::make(cfg("allgather", "int4:rotate=hadamard"));
  EXPECT_FALSE(gather->codecWork(n, 4, 1).withoutRotation);
  EXPECT_NEAR(predict(*gather, speed, n, t, 0, 0).codecSeconds, 4000 * 5e-9 + 16000 * 6e-9, 1e-15);
  EXPECT_FALSE(AllreduceAlgorithm::make(cfg("ring", "int4"))->codecWork(n, 4, 1).withoutRotation);
}

// measureCodecSpeed times a rotated codec three ways: as it is, less its rotation, and the rotation pass;
// a plain codec has no rotation to time.
TEST(CostModel, MeasuresARotatedCodecsHopsAndRotationApart) {
  const CodecSpeed rotated = measureCodecSpeed("int4:rotate=hadamard", "none", size_t{1} << 16, 3);
  EXPECT_GT(rotated.rotateSecondsPerElement, 0.0);
  EXPECT_GT(rotated.unrotatedEncodeSecondsPerElement, 0.0);
  EXPECT_GT(rotated.unrotatedDecodeSecondsPerElement, 0.0);
  const CodecSpeed plain = measureCodecSpeed("int4", "none", size_t{1} << 16, 3);
  EXPECT_EQ(plain.rotateSecondsPerElement, 0.0);
  EXPECT_EQ(plain.unrotatedEncodeSecondsPerElement, 0.0);
  EXPECT_GT(plain.encodeSecondsPerElement, 0.0);
}

TEST(CostModel, AutoPicksTreeForSmallLatencyBoundMessagesAndRingForLargeOnes) {
  const Topology t{8, 1, LinkModel::parse("inter=10GB/50us")};
  const std::vector<std::string> candidates = {"ring", "tree", "allgather"};
  EXPECT_EQ(pickAlgorithm(candidates, cfg("ring"), {}, 256, t), "tree");
  EXPECT_EQ(pickAlgorithm(candidates, cfg("ring"), {}, size_t{1} << 24, t), "ring");
  // Top-k cannot ride the ring or the tree: the only carrier is picked.
  EXPECT_EQ(pickAlgorithm(candidates, cfg("ring", "topk:ratio=0.01"), {}, 1 << 20, t), "allgather");
  EXPECT_THROW(pickAlgorithm({"ring"}, cfg("ring", "topk:ratio=0.01"), {}, 1 << 20, t), InvalidArgument);
}

TEST(CostModel, HierarchicalIsPickedWhenTheSlowLinkDominates) {
  const Topology t{4, 8, LinkModel::parse("intra=900GB/1us,inter=12GB/10us")};
  EXPECT_EQ(pickAlgorithm({"ring", "hierarchical"}, cfg("ring", "int8"), {}, size_t{1} << 26, t), "hierarchical");
}

// predictCodec: the one entry the `model` command and the Python binding share.
TEST(CostModel, PredictCodecResolvesAutoAndRefusesWhatCannotCarry) {
  const Topology t{8, 1, LinkModel::parse("inter=10GB/50us")};
  const auto small = predictCodec(cfg("ring"), "auto", {}, 256, t, 0, 0);
  EXPECT_EQ(small.algorithm, "tree");
  auto tree = AllreduceAlgorithm::make(cfg("tree"));
  EXPECT_EQ(small.prediction.wireSeconds, predict(*tree, {}, 256, t, 0, 0).wireSeconds);
  const auto sparse = predictCodec(cfg("ring", "topk:ratio=0.01"), "auto", {}, 1 << 20, t, 0.01, 1.0);
  EXPECT_EQ(sparse.algorithm, "allgather");
  EXPECT_EQ(sparse.prediction.exposedSeconds, std::max(0.0, sparse.prediction.allreduceSeconds - 0.01));
  EXPECT_THROW(predictCodec(cfg("ring", "topk:ratio=0.01"), "ring", {}, 1 << 20, t, 0, 0), InvalidArgument);
  EXPECT_THROW(predictCodec(cfg("ring"), "hierarchical", {}, 1 << 20, t, 0, 0), InvalidArgument);  // one rank a node
}

// DGC's warm-up sends up to a quarter of each tensor for its first steps; the model predicts the steps
// after it, which send the codec's own k (before 2026-12-05 it sized and timed the warm-up's first step).
TEST(CostModel, DgcIsPredictedPastItsWarmUp) {
  const Topology t{8, 1, LinkModel::parse("inter=10GB/50us")};
  const size_t n = size_t{1} << 20;
  AllreduceConfig warm = cfg("allgather", "topk:ratio=0.01"), plain = warm;
  warm.errorFeedback = "dgc:warmup=1000";
  plain.errorFeedback = "ef";
  EXPECT_EQ(predictCodec(warm, "allgather", {}, n, t, 0, 0).prediction.wireSeconds,
            predictCodec(plain, "allgather", {}, n, t, 0, 0).prediction.wireSeconds);
  const PayloadCodec dgc("topk:ratio=0.01", "dgc:warmup=1000");
  EXPECT_EQ(dgc.steadyStep(7).step, 1000u);
  EXPECT_EQ(dgc.steadyStep(7).seed, 7u);
  EXPECT_EQ(PayloadCodec("topk:ratio=0.01", "ef").steadyStep().step, 0u);
  EXPECT_EQ(encodedBytes(dgc, n), dgc.maxBytes(n, dgc.steadyStep()));
  EXPECT_GT(dgc.maxBytes(n, EncodeContext{}), 20 * encodedBytes(dgc, n));  // the warm-up's 25 % against 1 %
}

}  // namespace
}  // namespace gradcomp

