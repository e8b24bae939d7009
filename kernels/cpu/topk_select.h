// Exact top-k by magnitude with a radix select over the bits of |x| (for finite floats the bit
// pattern of |x| is monotone in |x|), and DGC's sampled threshold estimate.
//
// The selection is described by a threshold: every element with |x| bits > `bits`, plus the first
// `takeEqual` elements (in index order) whose |x| bits equal it. So ties go to the lower index, and
// the indices come out sorted, the same on every backend.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradcomp::cpu {

struct SelectionThreshold {
  uint32_t bits = 0;
  uint64_t takeEqual = 0;
  bool nonFinite = false;  // the input holds NaN/Inf: nothing else is meaningful
};

// Requires 0 < k <= n and finite input. Reads the input 2 to 4 times (histogram passes, one gather of
// the boundary bucket); no allocation proportional to n unless the data is extremely narrow.
SelectionThreshold radixSelect(const float* x, size_t n, size_t k);

// Writes the selected indices (ascending) and values; returns how many were written (at most `cap`).
// With takeEqual == UINT64_MAX every element at the threshold is taken ("|x| >= threshold").
template <typename Index>
size_t gatherSelected(const float* x, size_t n, SelectionThreshold t, size_t cap, Index* indices, float* values);

// Gathers every element with |x| bits >= minBits, in index order: writes at most `cap` of them and
// returns how many there are (stops counting at cap + 1). AVX2 compare + movemask when available.
size_t gatherAtLeast(const float* x, size_t n, uint32_t minBits, size_t cap, uint64_t* indices, float* values);

// Exact top-k in about one read of the input: a strided sample gives a lower bound admitting ~1.15k
// elements, one pass gathers those candidates, and an exact select runs on them. The result is the
// same as radixSelect + gatherSelected (ties to the lower index). Returns Fallback when the bound
// admitted fewer than k or too many candidates (heavy ties), or when the input is too small to gain.
enum class SampledTopK { Done, Fallback, NonFinite };
SampledTopK sampledTopK(const float* x, size_t n, size_t k, uint64_t* indices, float* values);

// DGC (Lin et al. 2018): estimates the |x| threshold keeping about k of n from a strided sample
// starting at `offset` % stride. The sample holds at least `minSample` elements and enough for about
// 2048 of them to pass (relative spread of the count ~ 1/sqrt(2048) ~ 2.2 %). Returns the |x| bits of
// the threshold; non-finite values in the sample are ignored (the caller's filter pass sees them).
uint32_t sampledThreshold(const float* x, size_t n, size_t k, size_t minSample, uint64_t offset);

}  // namespace gradcomp::cpu
