// Before any data moves, ranks agree on what they are about to do: a Bruck all-gather of one small
// descriptor per rank (ceil(log2 P) latencies). A mismatch is a CollectiveMismatch on every rank naming
// the first disagreeing rank and both values -- never a hang or a wrong sum (NCCL #1417 hangs instead).
// The descriptor holds everything that changes which messages flow or what they mean: the operation and
// its sequence number, the element count, root, tensor id and step, the node layout every rank sees
// (ranks per node decides hierarchical's groups), and the configuration in canonical form (algorithm,
// codec and error feedback with their defaults filled in, reduction, seed, pipeline chunk size), so a
// rank configured differently fails at once instead of timing out, and equivalent spellings agree.
#pragma once

#include <cstdint>
#include <string>

#include "collectives/communicator.h"

namespace gradcomp {

struct OpDescriptor {
  const char* operation = "";  // "all-reduce", "broadcast", ...
  uint64_t sequence = 0;
  uint64_t count = 0;          // elements
  int64_t root = -1;           // broadcast root (-1: none)
  uint32_t tensorId = 0;
  uint32_t step = 0;
  std::string config;          // algorithm, codec, error feedback, reduction, chunk: anything that must match
  uint64_t nonFiniteIndex = kNoNonFinite;  // first NaN/Inf of this rank's input (not compared)
  static constexpr uint64_t kNoNonFinite = ~uint64_t{0};
};

// Bytes of one rank's descriptor on the wire (each of the ceil(log2 P) rounds carries a power of two of
// them: the agreement's control traffic).
inline constexpr size_t kAgreementDescriptorBytes = 288;

struct NonFiniteInput {
  int rank = -1;  // -1: every rank's input is finite
  uint64_t index = 0;
};

// Throws CollectiveMismatch (every rank) or TimeoutError (a rank did not take part). Returns the first
// rank whose input holds a NaN/Inf, so every rank can apply the same non-finite policy.
NonFiniteInput agreeOnOperation(Communicator& comm, const OpDescriptor& op);

}  // namespace gradcomp
