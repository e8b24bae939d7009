// Software prefetch of a range of floats, for loops bound by their arithmetic on one thread: issued a
// tile ahead, the next tile's loads arrive while this one is computed, where the hardware prefetchers
// alone leave the memory idle during the arithmetic and the arithmetic idle during the reads
// (docs/notes.md has the measurements per codec).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradcomp::cpu {

enum class PrefetchInto { L1, L2 };

// One prefetch per 64-byte line of base[begin, end). The addresses are formed as integers: callers name
// the tile after the one they work on, which may lie past the end of their array; a prefetch never
// faults, but pointer arithmetic past the end is undefined.
inline void prefetchFloats(const float* base, size_t begin, size_t end, PrefetchInto into) {
  const uintptr_t origin = reinterpret_cast<uintptr_t>(base);
  for (size_t j = begin; j < end; j += 16) {
    const auto* line = reinterpret_cast<const void*>(origin + j * sizeof(float));
    if (into == PrefetchInto::L1)
      __builtin_prefetch(line, 0, 3);  // prefetcht0
    else
      __builtin_prefetch(line, 0, 2);  // prefetcht1
  }
}

}  // namespace gradcomp::cpu
