// The CUDA top-k's selection logic, emulated on the host with the same digit layout and choice rule
// (kernels/scalar/radix_digits.h) and checked against the CPU reference: the threshold and tie count
// of cpu::radixSelect, and the chosen indices of cpu::gatherSelected, on spread-out, narrow, tied and
// signed-zero data, for k from 1 to n; also through the sampled-bound candidate list the CUDA path
// takes first. The CUDA kernels add the parallel histogram, scan and compaction on top (run by
// gradcomp_cuda_codec_tests where a GPU is).
#include "kernels/scalar/radix_digits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/topk_select.h"

namespace gradcomp {
namespace {

uint32_t keyOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u & 0x7fffffffu;
}

struct Threshold {
  uint32_t bits = 0;
  uint64_t takeEqual = 0;
};

// The three passes as the CUDA kernels run them: histogram of the matching keys, then the digit
// whose suffix count first reaches k, scanning from the largest digit.
Threshold emulateSelect(const std::vector<uint32_t>& keys, uint64_t k) {
  uint32_t prefix = 0;
  uint64_t remaining = k;
  for (int pass = 0; pass < scalar::kRadixPasses; ++pass) {
    std::vector<unsigned long long> hist(scalar::kRadixBins, 0);
    for (uint32_t key : keys)
      if (scalar::radixMatches(key, prefix, pass)) ++hist[scalar::radixDigit(key, pass)];
    unsigned long long above = 0;
    bool found = false;
    for (int d = scalar::kRadixBins - 1; d >= 0 && !found; --d) {
      if (scalar::radixDigitHoldsK(above, hist[d], remaining)) {
        prefix |= static_cast<uint32_t>(d) << scalar::radixShift(pass);
        remaining -= above;
        found = true;
      }
      above += hist[d];
    }
    EXPECT_TRUE(found) << "pass " << pass;
  }
  return {prefix, remaining};
}

// The taken indices of an ascending list, as the CUDA flags + compaction choose them.
std::vector<uint64_t> taken(const std::vector<float>& x, const std::vector<uint64_t>& list, Threshold t) {
  std::vector<uint64_t> out;
  uint64_t equalSeen = 0;
  for (uint64_t i : list) {
    const uint32_t key = keyOf(x[i]);
    if (key > t.bits || (key == t.bits && equalSeen++ < t.takeEqual)) out.push_back(i);
  }
  return out;
}

std::vector<std::vector<float>> dataSets(size_t n) {
  std::mt19937_64 rng(n);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> sets(4, std::vector<float>(n));
  for (size_t i = 0; i < n; ++i) {
    sets[0][i] = normal(rng);                                                        // spread out
    sets[1][i] = 1.0f + static_cast<float>(rng() % 64) * 0x1p-23f;                   // one top bucket
    sets[2][i] = static_cast<float>(static_cast<int>(rng() % 7) - 3);                // heavy ties, +-0
    sets[3][i] = (i % 3 == 0 ? -1.0f : 1.0f) * static_cast<float>(rng() % 1000) * 1e-42f;  // subnormals
  }
  return sets;
}

TEST(RadixDigits, DigitsCoverTheKeyOnceFromTheTop) {
  EXPECT_EQ(scalar::radixShift(0) + scalar::radixBits(0), 31);
  EXPECT_EQ(scalar::radixShift(1) + scalar::radixBits(1), scalar::radixShift(0));
  EXPECT_EQ(scalar::radixShift(2) + scalar::radixBits(2), scalar::radixShift(1));
  EXPECT_EQ(scalar::radixShift(2), 0);
  const uint32_t key = 0x5a3c9e71u & 0x7fffffffu;
  uint32_t rebuilt = 0;
  for (int p = 0; p < scalar::kRadixPasses; ++p) rebuilt |= scalar::radixDigit(key, p) << scalar::radixShift(p);
  EXPECT_EQ(rebuilt, key);
}

TEST(RadixDigits, EmulatedSelectionEqualsTheCpuReference) {
  for (size_t n : {size_t{1}, size_t{2}, size_t{100}, size_t{5000}})
    for (const auto& x : dataSets(n))
      for (size_t k : {size_t{1}, size_t{2}, n / 100 + 1, n / 10 + 1, n / 2 + 1, n}) {
        if (k > n) continue;
        SCOPED_TRACE(::testing::Message() << "n=" << n << " k=" << k << " x0=" << x[0]);
        std::vector<uint32_t> keys(n);
        for (size_t i = 0; i < n; ++i) keys[i] = keyOf(x[i]);
        const cpu::SelectionThreshold cpuT = cpu::radixSelect(x.data(), n, k);
        const Threshold t = emulateSelect(keys, k);
        ASSERT_EQ(t.bits, cpuT.bits);
        ASSERT_EQ(t.takeEqual, cpuT.takeEqual);
        std::vector<uint64_t> all(n);
        for (size_t i = 0; i < n; ++i) all[i] = i;
        std::vector<uint64_t> cpuIdx(k);
        std::vector<float> cpuVal(k);
        ASSERT_EQ(cpu::gatherSelected<uint64_t>(x.data(), n, cpuT, k, cpuIdx.data(), cpuVal.data()), k);
        EXPECT_EQ(taken(x, all, t), cpuIdx);
      }
}

// The CUDA path's first try: a bound from a strided sample admitting about 1.25 k, the ascending list
// of keys at or above it, and the selection over that list alone. Whenever the list holds k or more,
// the answer is the reference's; with fewer, the CUDA code falls back to the full histogram.
TEST(RadixDigits, SampledBoundListGivesTheSameSelection) {
  int listUsed = 0, fellBack = 0;
  for (size_t n : {size_t{1000}, size_t{20000}})
    for (const auto& x : dataSets(n))
      for (size_t k : {size_t{1}, n / 1000 + 1, n / 100, n / 10}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " k=" << k);
        std::vector<uint32_t> keys(n);
        for (size_t i = 0; i < n; ++i) keys[i] = keyOf(x[i]);
        const size_t m = std::min<size_t>(n, 512), stride = n / m;
        std::vector<uint32_t> sample(m);
        for (size_t j = 0; j < m; ++j) sample[j] = keys[j * stride];
        const double expected = static_cast<double>(k) / static_cast<double>(n) * static_cast<double>(m);
        const size_t kS = std::min<size_t>(m, static_cast<size_t>(1.25 * expected) + 8);
        const uint32_t bound = emulateSelect(sample, kS).bits;
        std::vector<uint64_t> list;
        for (size_t i = 0; i < n; ++i)
          if (keys[i] >= bound) list.push_back(i);
        if (list.size() < k) {
          ++fellBack;
          continue;
        }
        ++listUsed;
        std::vector<uint32_t> listKeys;
        for (uint64_t i : list) listKeys.push_back(keys[i]);
        const Threshold t = emulateSelect(listKeys, k);
        const cpu::SelectionThreshold cpuT = cpu::radixSelect(x.data(), n, k);
        ASSERT_EQ(t.bits, cpuT.bits);
        ASSERT_EQ(t.takeEqual, cpuT.takeEqual);
        std::vector<uint64_t> cpuIdx(k);
        std::vector<float> cpuVal(k);
        cpu::gatherSelected<uint64_t>(x.data(), n, cpuT, k, cpuIdx.data(), cpuVal.data());
        EXPECT_EQ(taken(x, list, t), cpuIdx);
      }
  EXPECT_GT(listUsed, 20);  // the list path is the usual one, so it is the one tested here
  std::printf("sampled-bound list used in %d cases, fallback in %d\n", listUsed, fellBack);
}

}  // namespace
}  // namespace gradcomp
