// `allgather`: each rank encodes its whole gradient once (error feedback at the source), the payloads
// travel the ring unchanged (variable sizes allowed: threshold), and every rank decodes all P payloads
// in rank order -- the same additions in the same order, so the same bits everywhere. The only choice
// for payloads that cannot be summed on the wire (top-k, threshold) and a good one for 1-bit codecs.
#include "collectives/algorithm_registry.h"
#include "collectives/ring_primitives.h"

namespace gradcomp {
namespace {

class AllgatherAllreduce final : public AllreduceAlgorithm {
 public:
  explicit AllgatherAllreduce(const AllreduceConfig& c) : AllreduceAlgorithm(c) {}

  void sum(std::span<float> data, Communicator& comm, const OpContext& op) override {
    const int p = comm.size(), r = comm.rank();
    const EncodeContext ctx = encodeContext(comm, op, 0);
    GatheredPayloads payloads(p, payload_.maxBytes(data.size(), ctx), scratch_.gathered);
    payloads.setSize(r, payload_.encode(data, payloads.slot(r), ctx));
    ringAllgatherBytes({comm, op.sequence, 3, op.tensorId, op.step, config_.seed, &scratch_}, payloads);
    for (int q = 0; q < p; ++q)
      payload_.decode(payloads.payload(q), data, q == 0 ? DecodeMode::Overwrite : DecodeMode::Accumulate);
  }

  double predictSeconds(size_t n, int ranks, int ranksPerNode, const LinkModel& links) const override {
    if (ranks <= 1) return 0;
    const LinkSpec& l = ranksPerNode < ranks ? links.inter : links.intra;
    return (ranks - 1) * l.seconds(encodedBytes(payload_, n));
  }
  // One encode of the whole tensor, P decodes of it.
  CodecWork codecWork(size_t n, int ranks, int) const override {
    return {static_cast<double>(n), static_cast<double>(n) * ranks};
  }
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> makeAllgatherAllreduce(const AllreduceConfig& c) {
  return std::make_unique<AllgatherAllreduce>(c);
}

}  // namespace gradcomp
