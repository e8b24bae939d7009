// cpu::feistelIndices on every vector path this CPU runs against the scalar permutation, value for value:
// domains from 1 to 2^32 (the last the 16-lane path takes) and past it, starts that are not a multiple of
// 16, counts with every tail length, and a range that crosses 2^32 (the scalar fallback).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/feistel_indices.h"
#include "tests/kernels/cpu_path_params.h"

namespace gradcomp::cpu {
namespace {

class FeistelIndicesPaths : public CpuPathTest {};

TEST_P(FeistelIndicesPaths, EveryDomainGivesTheScalarCoordinates) {
  setCpuPath(GetParam());
  size_t compared = 0;
  for (const uint64_t n : {uint64_t{1}, uint64_t{2}, uint64_t{5}, uint64_t{17}, uint64_t{1000}, uint64_t{65536},
                           (uint64_t{1} << 20) + 3, (uint64_t{1} << 24), (uint64_t{1} << 31) + 7, uint64_t{1} << 32,
                           (uint64_t{1} << 32) + 1, uint64_t{1} << 40}) {
    const auto perm = scalar::FeistelPermutation::make(n, 0x1234 + n, 7, 3);
    for (const uint64_t first : {uint64_t{0}, uint64_t{5}, uint64_t{1} << 20, (uint64_t{1} << 32) - 21}) {
      if (first >= n) continue;
      const size_t count = static_cast<size_t>(std::min<uint64_t>(n - first, 150));
      std::vector<uint64_t> got(count + 1, ~uint64_t{0});
      feistelIndices(perm, first, count, got.data());
      SCOPED_TRACE(::testing::Message() << "n " << n << " first " << first);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(got[i], perm(first + i)) << "coordinate " << first + i;
        ASSERT_LT(got[i], n);
      }
      ASSERT_EQ(got[count], ~uint64_t{0});  // nothing written past the count
      compared += count;
    }
  }
  // A whole small domain is a permutation: every coordinate exactly once.
  for (const uint64_t n : {uint64_t{1}, uint64_t{33}, uint64_t{4096}, uint64_t{100003}}) {
    const auto perm = scalar::FeistelPermutation::make(n, 99, 1, 2);
    std::vector<uint64_t> all(n);
    feistelIndices(perm, 0, n, all.data());
    std::sort(all.begin(), all.end());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(all[i], i) << "domain " << n;
  }
  std::printf("feistel coordinates: %zu on the %s path equal the scalar permutation\n", compared,
              cpuPathName(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(CpuPaths, FeistelIndicesPaths, ::testing::Values(CpuPath::Avx512, CpuPath::Avx2),
                         cpuPathTestName);

}  // namespace
}  // namespace gradcomp::cpu
