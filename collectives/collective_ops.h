// The primitives besides all-reduce, with and without a codec: reduce-scatter and all-gather (what
// ZeRO / FSDP shard with), broadcast and all-to-all. Same guarantees as the all-reduce: an agreement
// check before data moves, a deadline on every wait, peers' payloads validated before use.
//
//   reduceScatter  input n on every rank -> this rank's segment of the sum (segments as in
//                  ring_primitives.h: the first n % P ranks get one more element). P-1 steps.
//   allGather      m elements on every rank -> P*m, rank q's block at q*m. With a codec each block is
//                  encoded once by its owner and every rank (owner too) holds the decoded values.
//   broadcast      root's n elements to every rank, binomial tree (ceil(log2 P) rounds). With a codec
//                  the root encodes once, the bytes are forwarded, every rank (root too) decodes.
//   allToAll       n = P*m: block q of rank r goes to rank q's block r. Pairwise exchange, P-1 steps;
//                  with a codec each sent block is encoded (the own block is copied exactly).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "collectives/allreduce.h"
#include "collectives/ring_primitives.h"

namespace gradcomp {

struct CollectiveConfig {
  std::string codec = "none";
  std::string errorFeedback = "none";
  ReduceOp op = ReduceOp::Sum;  // reduce-scatter only
  uint64_t seed = 0;
  size_t chunkBytes = size_t{1} << 20;
};

struct CollectiveReport {
  uint64_t sequence = 0;
  uint64_t bytesSent = 0;
  CodecCost cost;
};

class CollectiveOps {
 public:
  explicit CollectiveOps(CollectiveConfig config);

  CollectiveReport reduceScatter(std::span<const float> input, std::span<float> output, Communicator& comm,
                                 const AllreduceCall& call = {});
  CollectiveReport allGather(std::span<const float> mine, std::span<float> output, Communicator& comm,
                             const AllreduceCall& call = {});
  CollectiveReport broadcast(std::span<float> data, int root, Communicator& comm, const AllreduceCall& call = {});
  CollectiveReport allToAll(std::span<const float> input, std::span<float> output, Communicator& comm,
                            const AllreduceCall& call = {});

  PayloadCodec& payload() { return payload_; }

 private:
  // The agreement check of one operation (run under its OperationScope); returns its sequence number.
  uint64_t begin(const Communicator::OperationScope& scope, const char* operation, uint64_t count, int64_t root,
                 Communicator& comm, std::span<const float> input, const AllreduceCall& call);
  CollectiveReport finish(uint64_t sequence, uint64_t bytes0, const CodecCost& cost0, const Communicator& comm);
  std::string describe() const;

  CollectiveConfig config_;
  PayloadCodec payload_;
  RingScratch scratch_;
};

}  // namespace gradcomp
