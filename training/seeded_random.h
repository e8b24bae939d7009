// Counter-based randomness for training: every random number is a pure function of
// (seed, purpose, index, element), so data, initialisation and batches are the same for the same seed
// on any number of threads, after any checkpoint/resume, with no generator state to save.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/scalar/philox.h"
#include "training/reproducible_math.h"

namespace gradcomp {

// What a stream is for: the counter word that keeps purposes apart.
enum class RandomPurpose : uint32_t { Data = 1, Init = 2, Batches = 3, Split = 4, Shard = 5, Labels = 6 };

class SeededRandom {
 public:
  // `index` separates streams of one purpose (a tensor, a rank, an epoch).
  SeededRandom(uint64_t seed, RandomPurpose purpose, uint32_t index)
      : stream_(scalar::RngStream::make(seed, index, static_cast<uint32_t>(purpose), 0x7261696eu /*"rain"*/)) {}

  uint32_t word(uint64_t i) const { return stream_.word(i); }
  // Uniform in [0, 1).
  float uniform(uint64_t i) const { return scalar::uniform01(word(i)); }
  // Standard normal (Box-Muller on words 2i and 2i+1), computed in double with the reproducible log and
  // cos (training/reproducible_math.h), so it is the same on every compiler, libm and CPU.
  float normal(uint64_t i) const {
    const double u1 = (static_cast<double>(word(2 * i) >> 8) + 0.5) * (1.0 / 16777216.0);
    const double u2 = static_cast<double>(word(2 * i + 1) >> 8) * (1.0 / 16777216.0);
    return static_cast<float>(std::sqrt(-2.0 * repro::log(u1)) * repro::cos2pi(u2));
  }
  // Uniform integer in [0, n) (n < 2^32; the modulo bias is below 2^-32 * n, irrelevant here).
  uint32_t below(uint64_t i, uint32_t n) const {
    return static_cast<uint32_t>((static_cast<uint64_t>(word(i)) * n) >> 32);
  }

 private:
  scalar::RngStream stream_;
};

}  // namespace gradcomp
