// `hierarchical`: the slow link is the one to compress. Inside a node, an uncompressed ring
// reduce-scatter leaves local rank l with the node's sum of shard l; local ranks l of all nodes then
// all-reduce that shard with the inter-node algorithm (any other algorithm, with the codec); an
// uncompressed intra-node all-gather completes the result. Inter-node bytes per rank shrink by the
// ranks-per-node factor times the codec's ratio. Needs the same number of ranks on every node (refused
// otherwise, naming the counts). A codec on ranks that are all on one node would never run: refused too,
// rather than silently sending uncompressed data.
#include <map>
#include <sstream>

#include "collectives/algorithm_registry.h"
#include "collectives/ring_primitives.h"
#include "core/error.h"

namespace gradcomp {
namespace {

class HierarchicalAllreduce final : public AllreduceAlgorithm {
 public:
  explicit HierarchicalAllreduce(const AllreduceConfig& c) : AllreduceAlgorithm(c) {
    GRADCOMP_CHECK_ARG(c.interAlgorithm != "hierarchical", "hierarchical all-reduce cannot nest itself");
    GRADCOMP_CHECK_ARG(c.interAlgorithm != "powersgd", "hierarchical all-reduce cannot run 'powersgd' between nodes: ",
                       "it hands each node a shard of the bucket, which is not a matrix (use 'powersgd' alone)");
    AllreduceConfig inner = c;
    inner.algorithm = c.interAlgorithm;
    inner_ = AllreduceAlgorithm::make(inner);
    requireSourceFeedback();
  }

  PayloadCodec& codecInUse() override { return inner_->payload(); }

  void sum(std::span<float> data, Communicator& comm, const OpContext& op) override {
    const int perNode = comm.uniformRanksPerNode();
    if (perNode == 0) {
      std::map<int, int> counts;
      for (int r = 0; r < comm.size(); ++r) ++counts[comm.node(r)];
      std::ostringstream o;
      for (const auto& [node, n] : counts) o << " node " << node << ": " << n << ';';
      GRADCOMP_THROW(InvalidArgument, "hierarchical all-reduce needs the same number of ranks on every node, got",
                     o.str(), " use 'ring' or set ranks per node to a divisor of the world size");
    }
    // Every rank sees the same layout (the agreement check compared it), so every rank refuses alike.
    GRADCOMP_CHECK_ARG(comm.numNodes() > 1 || inner_->payload().raw() || comm.size() == 1,
                       "hierarchical all-reduce compresses only between nodes, and these ", comm.size(),
                       " ranks are all on one node: codec '", inner_->payload().codecSpec(),
                       "' would never run. Use algorithm 'ring' (or 'allgather') to compress on one node, set ranks "
                       "per node to split the ranks into nodes, or use codec 'none'");
    Groups& g = groupsFor(comm);
    const Segments shards{data.size(), static_cast<size_t>(perNode)};
    const size_t local = static_cast<size_t>(g.intra->rank());
    const Communicator::OperationScope intraScope(*g.intra, "hierarchical all-reduce (intra-node)");
    const RingContext rc{*g.intra, intraScope.sequence(), 1, op.tensorId, op.step, config_.seed, &scratch_};
    ringReduceScatterRaw(rc, data, config_.chunkBytes);
    const auto shard = data.subspan(shards.begin(local), shards.size(local));
    if (g.inter->size() > 1) {
      const Communicator::OperationScope interScope(*g.inter, "hierarchical all-reduce (inter-node)");
      inner_->sum(shard, *g.inter, {interScope.sequence(), op.tensorId, op.step, 0, {}});
    }
    ringAllgatherRaw(rc, data, config_.chunkBytes);
  }

  double predictSeconds(size_t n, int ranks, int ranksPerNode, const LinkModel& links) const override {
    if (ranks <= 1) return 0;
    const int perNode = ranksPerNode > 0 ? ranksPerNode : ranks, nodes = ranks / perNode;
    const size_t shard = (n + static_cast<size_t>(perNode) - 1) / static_cast<size_t>(perNode);
    const double intra = 2.0 * (perNode - 1) * links.intra.seconds(shard * sizeof(float));
    return intra + inner_->predictSeconds(shard, nodes, 1, links);
  }
  CodecWork codecWork(size_t n, int ranks, int ranksPerNode) const override {
    const int perNode = ranksPerNode > 0 ? ranksPerNode : ranks;
    return inner_->codecWork((n + static_cast<size_t>(perNode) - 1) / static_cast<size_t>(perNode), ranks / perNode, 1);
  }

 private:
  struct Groups {
    std::unique_ptr<Communicator> intra, inter;
  };
  // The node communicators are made once per communicator (split is collective and costs latency).
  Groups& groupsFor(Communicator& comm) {
    auto it = groups_.find(comm.id());
    if (it != groups_.end()) return it->second;
    Groups g;
    g.intra = comm.split(comm.node(comm.rank()), comm.rank());
    g.inter = comm.split(g.intra->rank(), comm.node(comm.rank()));
    return groups_.emplace(comm.id(), std::move(g)).first->second;
  }

  std::unique_ptr<AllreduceAlgorithm> inner_;
  std::map<uint64_t, Groups> groups_;
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> makeHierarchicalAllreduce(const AllreduceConfig& c) {
  return std::make_unique<HierarchicalAllreduce>(c);
}

}  // namespace gradcomp
