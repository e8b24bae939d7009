// Before any data moves, ranks agree on what they are about to do: a Bruck all-gather of one small
// descriptor per rank (ceil(log2 P) latencies). A mismatch is a CollectiveMismatch on every rank naming
// the first disagreeing rank and both values -- never a hang or a wrong sum (NCCL #1417 hangs instead).
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
  std::string config;          // algorithm, codec, error feedback, reduction: anything that must match
  uint64_t nonFiniteIndex = kNoNonFinite;  // first NaN/Inf of this rank's input (not compared)
  static constexpr uint64_t kNoNonFinite = ~uint64_t{0};
};

struct NonFiniteInput {
  int rank = -1;  // -1: every rank's input is finite
  uint64_t index = 0;
};

// Throws CollectiveMismatch (every rank) or TimeoutError (a rank did not take part). Returns the first
// rank whose input holds a NaN/Inf, so every rank can apply the same non-finite policy.
NonFiniteInput agreeOnOperation(Communicator& comm, const OpDescriptor& op);

}  // namespace gradcomp
