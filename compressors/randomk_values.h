// The values section of a random-k wire buffer. Every rank that shares the key (seed, step, tensor)
// selects the same coordinates in the same order, so the values of several ranks' payloads can be
// summed element by element: the `randomk` all-reduce sums these in place and then decodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace gradcomp {

struct RandomKValues {
  std::byte* data = nullptr;  // count fp32 or fp16 values, in permutation order
  uint64_t count = 0;
  bool fp16 = false;
};

// Validates the header (DecodeError if it is not a random-k wire of that size).
RandomKValues randomKValues(std::span<std::byte> wire);

}  // namespace gradcomp
