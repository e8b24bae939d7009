// Mini-batches of one rank's shard, as a pure function of (seed, rank, step): epoch e visits the shard
// in the order of a keyed permutation (kernels/scalar/feistel_permutation.h) of that epoch, so sampling
// is without replacement inside an epoch, and a resumed run draws exactly the batches the
// uninterrupted run would have, with no sampler state to save.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "kernels/scalar/feistel_permutation.h"

namespace gradcomp {

class BatchSampler {
 public:
  BatchSampler(std::vector<size_t> shard, size_t batchSize, uint64_t seed, uint32_t rank)
      : shard_(std::move(shard)), batchSize_(batchSize), seed_(seed), rank_(rank) {
    GRADCOMP_CHECK_ARG(!shard_.empty(), "rank ", rank, " has no training samples");
    GRADCOMP_CHECK_ARG(batchSize_ > 0, "batch size 0");
  }

  // Rows (indices into the training set) of the batch of `step`.
  std::vector<size_t> batch(uint64_t step) const {
    std::vector<size_t> rows(batchSize_);
    const uint64_t n = shard_.size();
    for (size_t j = 0; j < batchSize_; ++j) {
      const uint64_t position = step * batchSize_ + j;
      const uint64_t epoch = position / n;
      // Seed and rank in the key, the epoch as the "step" word: a fresh order per epoch and rank.
      const auto perm = scalar::FeistelPermutation::make(n, seed_ ^ (uint64_t{rank_} << 40), static_cast<uint32_t>(epoch),
                                                         0x62617463u /*"batc"*/);
      rows[j] = shard_[perm(position % n)];
    }
    return rows;
  }
  size_t shardSize() const { return shard_.size(); }

 private:
  std::vector<size_t> shard_;
  size_t batchSize_;
  uint64_t seed_;
  uint32_t rank_;
};

}  // namespace gradcomp
