// `tree`: recursive doubling, ceil(log2 P) rounds of the whole vector: the latency-bound choice for
// small messages. A non-power-of-two world first folds its first 2*(P - 2^m) ranks in pairs (the even
// one hands its data to the odd one and gets the result back at the end).
// Identity on every rank: partners add the same two vectors (a + b == b + a in IEEE arithmetic); with a
// codec both use the decoded values of both sides, so the sums stay identical.
#include "collectives/algorithm_registry.h"
#include "core/error.h"

namespace gradcomp {
namespace {

class TreeAllreduce final : public AllreduceAlgorithm {
 public:
  explicit TreeAllreduce(const AllreduceConfig& c) : AllreduceAlgorithm(c) {
    if (!payload_.raw()) {
      requireReencodable();
      requireSourceFeedback();
    }
  }

  void sum(std::span<float> data, Communicator& comm, const OpContext& op) override {
    const int p = comm.size(), r = comm.rank();
    if (p == 1) return;
    int p2 = 1;
    while (p2 * 2 <= p) p2 *= 2;
    const int extra = p - p2;
    const Tag tag = makeTag(op.sequence, 4);
    if (r < 2 * extra) {
      if (r % 2 == 0) {  // folded: hand the data over, get the result back
        sendContribution(data, comm, op, r + 1, tag, 0);
        Request back = comm.irecv(std::as_writable_bytes(data), r + 1, tag);
        expect(comm.wait(back, comm.deadline(), "tree all-reduce (result of the fold)"), data.size_bytes());
        return;
      }
      receiveContribution(data, comm, r - 1, tag);
    }
    const int newRank = r < 2 * extra ? r / 2 : r - extra;
    auto realRank = [&](int n) { return n < extra ? 2 * n + 1 : n + extra; };
    size_t round = 1;
    for (int mask = 1; mask < p2; mask <<= 1, ++round) exchange(data, comm, op, realRank(newRank ^ mask), tag, round);
    if (r < 2 * extra) {
      Request back = comm.isend(std::as_bytes(data), r - 1, tag);
      comm.wait(back, comm.deadline(), "tree all-reduce (result of the fold)");
    }
  }

  double predictSeconds(size_t n, int ranks, int ranksPerNode, const LinkModel& links) const override {
    if (ranks <= 1) return 0;
    const LinkSpec& l = ranksPerNode < ranks ? links.inter : links.intra;
    int rounds = 0, p2 = 1;
    while (p2 * 2 <= ranks) p2 *= 2, ++rounds;
    const double fold = ranks > p2 ? l.seconds(encodedBytes(payload_, n)) + l.seconds(n * sizeof(float)) : 0.0;
    return rounds * l.seconds(encodedBytes(payload_, n)) + fold;
  }
  // Per round: encode the vector, decode it and the partner's.
  CodecWork codecWork(size_t n, int ranks, int) const override {
    if (payload_.raw() || ranks <= 1) return {};
    int rounds = 0;
    for (int p2 = 1; p2 * 2 <= ranks; p2 *= 2) ++rounds;
    return {static_cast<double>(n) * rounds, 2.0 * static_cast<double>(n) * rounds};
  }

 private:
  static void expect(size_t got, size_t want) {
    if (got != want) GRADCOMP_THROW(TransportError, "tree all-reduce: peer sent ", got, " bytes, expected ", want);
  }

  void sendContribution(std::span<float> data, Communicator& comm, const OpContext& op, int peer, Tag tag,
                        size_t segment) {
    Request s;
    if (payload_.raw()) {
      s = comm.isend(std::as_bytes(data), peer, tag);
    } else {
      const EncodeContext ctx = encodeContext(comm, op, segment);
      const auto wire = sendWire_.span(payload_.maxBytes(data.size(), ctx));
      s = comm.isend(wire.first(payload_.encode(data, wire, ctx)), peer, tag);
    }
    comm.wait(s, comm.deadline(), "tree all-reduce (fold)");
  }

  void receiveContribution(std::span<float> data, Communicator& comm, int peer, Tag tag) {
    if (payload_.raw()) {
      incoming_.resize(data.size());
      Request q = comm.irecv(std::as_writable_bytes(std::span(incoming_)), peer, tag);
      expect(comm.wait(q, comm.deadline(), "tree all-reduce (fold)"), data.size_bytes());
      for (size_t i = 0; i < data.size(); ++i) data[i] += incoming_[i];
      return;
    }
    const auto wire = recvWire_.span(payload_.maxBytes(data.size(), EncodeContext{}));
    Request q = comm.irecv(wire, peer, tag);
    const size_t got = comm.wait(q, comm.deadline(), "tree all-reduce (fold)");
    payload_.decode(wire.first(got), data, DecodeMode::Accumulate);
  }

  void exchange(std::span<float> data, Communicator& comm, const OpContext& op, int partner, Tag tag, size_t round) {
    const Deadline d = comm.deadline();
    if (payload_.raw()) {
      incoming_.resize(data.size());
      comm.groupStart();
      Request q = comm.irecv(std::as_writable_bytes(std::span(incoming_)), partner, tag);
      Request s = comm.isend(std::as_bytes(data), partner, tag);
      comm.groupEnd();
      expect(comm.wait(q, d, "tree all-reduce"), data.size_bytes());
      comm.wait(s, d, "tree all-reduce");  // the send reads `data`: finish it before adding into it
      for (size_t i = 0; i < data.size(); ++i) data[i] += incoming_[i];
      return;
    }
    const EncodeContext ctx = encodeContext(comm, op, round);
    const auto recvWire = recvWire_.span(payload_.maxBytes(data.size(), ctx));
    Request q = comm.irecv(recvWire, partner, tag);
    const auto sendWire = sendWire_.span(payload_.maxBytes(data.size(), ctx));
    const size_t bytes = payload_.encode(data, sendWire, ctx);
    Request s = comm.isend(sendWire.first(bytes), partner, tag);
    payload_.decode(sendWire.first(bytes), data, DecodeMode::Overwrite);  // both sides add decoded values
    const size_t got = comm.wait(q, d, "tree all-reduce");
    payload_.decode(recvWire.first(got), data, DecodeMode::Accumulate);
    comm.wait(s, d, "tree all-reduce");
  }

  WireBuffer sendWire_, recvWire_;
  std::vector<float> incoming_;
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> makeTreeAllreduce(const AllreduceConfig& c) {
  return std::make_unique<TreeAllreduce>(c);
}

}  // namespace gradcomp
