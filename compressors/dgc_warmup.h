// DGC's warm-up (Lin et al., ICLR 2018: "exponentially increasing sparsity"): during its first `warmup`
// steps a sparse codec sends more than its own k entries of an n-element tensor: 25 %, then 6.25 %,
// 1.56 % and 0.39 % over four equal stages, never fewer than its own k. One rule for every caller (the
// C++ DgcFeedback policy, and through the binding the PyTorch hook's per-part counts), because a sender
// and its receivers must agree on the count exactly: receivers bound each wire by it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace gradcomp {

// The entries to send at `step` (0-based) of a `warmup`-step warm-up, for a codec that sends ownEntries
// (its Compressor::sparseEntries(n); 0 for a dense codec) of n: 0, meaning the codec's own k, once the
// warm-up is over, when there is none, or when the codec is dense.
inline uint64_t dgcWarmupEntries(uint64_t ownEntries, uint64_t n, uint64_t step, uint32_t warmup) {
  if (ownEntries == 0 || step >= warmup) return 0;
  const uint64_t stage = 4 * step / warmup;  // 0..3: step < warmup < 2^32, so 4 step cannot overflow
  const double density = std::pow(0.25, static_cast<double>(stage + 1));
  const auto k = static_cast<uint64_t>(std::ceil(density * static_cast<double>(n)));
  return std::max(k, ownEntries);
}

}  // namespace gradcomp
