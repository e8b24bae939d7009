// `ring`: reduce-scatter then all-gather (collectives/ring_primitives.h). Uncompressed it moves raw fp32
// in pipelined chunks; with a codec it is the compressed ring of CGX: every reduce-scatter hop encodes
// the partial sum, the receiver decodes and accumulates in fp32 (never re-quantizing a sum it adds to),
// and each reduced segment is encoded once and forwarded unchanged in the all-gather.
#include "collectives/algorithm_registry.h"
#include "collectives/ring_primitives.h"

namespace gradcomp {
namespace {

class RingAllreduce final : public AllreduceAlgorithm {
 public:
  explicit RingAllreduce(const AllreduceConfig& c) : AllreduceAlgorithm(c) {
    if (!payload_.raw()) {
      requireReencodable();
      requireSourceFeedback();
    }
  }

  void sum(std::span<float> data, Communicator& comm, const OpContext& op) override {
    const RingContext rc{comm, op.sequence, 1, op.tensorId, op.step, config_.seed, &scratch_};
    if (payload_.raw()) {
      ringReduceScatterRaw(rc, data, config_.chunkBytes);
      ringAllgatherRaw(rc, data, config_.chunkBytes);
    } else {
      ringReduceScatterCoded(rc, data, payload_, config_.chunkBytes);
      ringAllgatherCoded(rc, data, payload_, config_.chunkBytes);
    }
  }

  double predictSeconds(size_t n, int ranks, int ranksPerNode, const LinkModel& links) const override {
    if (ranks <= 1) return 0;
    const LinkSpec& l = ranksPerNode < ranks ? links.inter : links.intra;
    const size_t segment = (n + static_cast<size_t>(ranks) - 1) / static_cast<size_t>(ranks);
    return 2.0 * (ranks - 1) * l.seconds(encodedBytes(payload_, segment));
  }
  // Every rank encodes each segment once (P-1 hops + its all-gather segment) and decodes P-1 hop
  // payloads and P-1 all-gather payloads plus its own.
  CodecWork codecWork(size_t n, int ranks, int) const override {
    if (payload_.raw() || ranks <= 1) return {};
    const double seg = static_cast<double>(n) / ranks;
    return {static_cast<double>(n), seg * (2.0 * (ranks - 1) + 1)};
  }
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> makeRingAllreduce(const AllreduceConfig& c) {
  return std::make_unique<RingAllreduce>(c);
}

}  // namespace gradcomp
