// `vendor`: the transport's own fp32 all-reduce (MPI_Iallreduce, ncclAllReduce), polled against the
// deadline. The baseline every other algorithm is measured against.
#include <cmath>

#include "collectives/algorithm_registry.h"

namespace gradcomp {
namespace {

class VendorAllreduce final : public AllreduceAlgorithm {
 public:
  explicit VendorAllreduce(const AllreduceConfig& c) : AllreduceAlgorithm(c) {
    requireLosslessOnly("the vendor all-reduce sums raw fp32 (use 'ring' or 'allgather' for codecs)");
  }
  void sum(std::span<float> data, Communicator& comm, const OpContext& op) override {
    if (comm.size() > 1) comm.vendorAllreduceSum(data, comm.deadline(), op.sequence, config_.blockingVendor);
  }
  // Modelled as the bandwidth-optimal ring; the real algorithm is the library's choice.
  double predictSeconds(size_t n, int ranks, int ranksPerNode, const LinkModel& links) const override {
    if (ranks <= 1) return 0;
    const LinkSpec& l = ranksPerNode < ranks ? links.inter : links.intra;
    return 2.0 * (ranks - 1) * l.seconds(n * sizeof(float) / static_cast<size_t>(ranks));
  }
  CodecWork codecWork(size_t, int, int) const override { return {}; }
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> makeVendorAllreduce(const AllreduceConfig& c) {
  return std::make_unique<VendorAllreduce>(c);
}

}  // namespace gradcomp
