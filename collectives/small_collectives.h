// Latency-bound helpers for small, fixed-size blocks: the agreement check, split(), and size exchanges.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "collectives/communicator.h"
#include "core/error.h"

namespace gradcomp {

// Bruck all-gather: ceil(log2 P) rounds. `mine` is this rank's block; every rank passes the same size.
// Returns P blocks, block r at offset r * mine.size(). Every wait has the communicator's deadline.
std::vector<std::byte> allgatherSmall(Communicator& comm, std::span<const std::byte> mine, Tag tag,
                                      const char* what);

}  // namespace gradcomp
