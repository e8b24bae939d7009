// A keyed pseudo-random permutation of [0, n): a 4-round balanced Feistel network on the smallest
// domain of 4^h >= n elements, with cycle-walking back into [0, n) (expected < 4 steps). Random-k takes
// the images of 0..k-1: k distinct coordinates with no sort and no hash set, computable per element on
// any backend, and identical on every rank that shares the key.
#pragma once

#include "kernels/scalar/philox.h"

namespace gradcomp::scalar {

GRADCOMP_HD uint32_t mix32(uint32_t x) {  // murmur3 finalizer: a cheap full-avalanche round function
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}

struct FeistelPermutation {
  uint64_t n;
  uint32_t halfBits;
  uint32_t keys[4];

  // The key is shared by all ranks: (seed, step, tensor), never the rank.
  GRADCOMP_HD static FeistelPermutation make(uint64_t n, uint64_t seed, uint32_t step, uint32_t tensor) {
    FeistelPermutation p{};
    p.n = n;
    p.halfBits = 1;
    while (p.halfBits < 32 && (uint64_t{1} << (2 * p.halfBits)) < n) ++p.halfBits;
    const Philox4 k = philox4x32_10(Philox4{{step, tensor, 0x72616e64u /*"rand"*/, 0x6b6b6b6bu}},
                                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    for (int i = 0; i < 4; ++i) p.keys[i] = k.v[i];
    return p;
  }

  GRADCOMP_HD uint64_t permuteDomain(uint64_t x) const {
    const uint64_t mask = (uint64_t{1} << halfBits) - 1;
    uint64_t left = x >> halfBits, right = x & mask;
    for (int r = 0; r < 4; ++r) {
      const uint64_t f = mix32(static_cast<uint32_t>(right) ^ keys[r] ^ static_cast<uint32_t>(right >> 32)) & mask;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    return (left << halfBits) | right;
  }

  // The j-th coordinate (j < n).
  GRADCOMP_HD uint64_t operator()(uint64_t j) const {
    uint64_t x = permuteDomain(j);
    while (x >= n) x = permuteDomain(x);
    return x;
  }
};

}  // namespace gradcomp::scalar
