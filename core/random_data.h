// Seeded synthetic gradients for the experiments: N(0, 1), the same vector for the same seed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace gradcomp {

inline std::vector<float> normalVector(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  return x;
}

}  // namespace gradcomp
