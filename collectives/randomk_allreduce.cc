// `randomk`: every rank draws the same k coordinates from the shared key (seed, step, tensor), so only
// the k values travel and they can be summed on the wire: encode with error feedback at the source,
// all-reduce the values section with the ring (fp32 values: raw; fp16 values: the compressed ring with
// fp16 hops, exactly representable after its all-gather), write the sums back and decode.
#include <cstring>

#include "collectives/algorithm_registry.h"
#include "collectives/ring_primitives.h"
#include "compressors/randomk_values.h"
#include "core/error.h"
#include "kernels/scalar/float_formats.h"

namespace gradcomp {
namespace {

class RandomKAllreduce final : public AllreduceAlgorithm {
 public:
  explicit RandomKAllreduce(const AllreduceConfig& c) : AllreduceAlgorithm(c), fp16Values_("fp16", "none") {
    GRADCOMP_CHECK_ARG(payload_.codec().id() == CodecId::RandomK, "algorithm 'randomk' cannot carry codec '",
                       payload_.codecSpec(), "': it needs the randomk codec (e.g. randomk:ratio=0.01)");
  }

  void sum(std::span<float> data, Communicator& comm, const OpContext& op) override {
    const EncodeContext ctx = encodeContext(comm, op, 0);
    const auto wire = wire_.span(payload_.maxBytes(data.size(), ctx));
    const size_t bytes = payload_.encode(data, wire, ctx);
    const RandomKValues v = randomKValues(wire.first(bytes));
    values_.resize(v.count);
    if (v.fp16) {
      for (uint64_t j = 0; j < v.count; ++j) {
        uint16_t h;
        std::memcpy(&h, v.data + 2 * j, 2);
        values_[j] = scalar::halfBitsToFloat(h);
      }
    } else if (v.count) {
      std::memcpy(values_.data(), v.data, v.count * sizeof(float));
    }
    const RingContext rc{comm, op.sequence, 5, op.tensorId, op.step, config_.seed, &scratch_};
    if (v.fp16) {
      ringReduceScatterCoded(rc, values_, fp16Values_, config_.chunkBytes);
      ringAllgatherCoded(rc, values_, fp16Values_, config_.chunkBytes);
      for (uint64_t j = 0; j < v.count; ++j) {
        const uint16_t h = scalar::floatToHalfBits(values_[j]);  // exact: the all-gather decoded fp16
        std::memcpy(v.data + 2 * j, &h, 2);
      }
    } else {
      ringReduceScatterRaw(rc, values_, config_.chunkBytes);
      ringAllgatherRaw(rc, values_, config_.chunkBytes);
      if (v.count) std::memcpy(v.data, values_.data(), v.count * sizeof(float));
    }
    payload_.decode(wire.first(bytes), data, DecodeMode::Overwrite);
  }

  double predictSeconds(size_t n, int ranks, int ranksPerNode, const LinkModel& links) const override {
    if (ranks <= 1) return 0;
    const LinkSpec& l = ranksPerNode < ranks ? links.inter : links.intra;
    const size_t k = payload_.codec().sparseEntries(n);
    return 2.0 * (ranks - 1) * l.seconds(k * sizeof(float) / static_cast<size_t>(ranks));
  }
  // One encode (a pass over the tensor with error feedback) and one decode (a scatter into zeros).
  CodecWork codecWork(size_t n, int, int) const override { return {static_cast<double>(n), static_cast<double>(n)}; }

 private:
  PayloadCodec fp16Values_;
  WireBuffer wire_;
  std::vector<float> values_;
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> makeRandomKAllreduce(const AllreduceConfig& c) {
  return std::make_unique<RandomKAllreduce>(c);
}

}  // namespace gradcomp
