#include <gtest/gtest.h>

#include <set>

#include "kernels/scalar/feistel_permutation.h"
#include "kernels/scalar/philox.h"

namespace gradcomp::scalar {
namespace {

// Known-answer vectors of Philox4x32-10 published with Random123 (Salmon et al.).
TEST(Philox, KnownAnswerVectors) {
  auto r = philox4x32_10(Philox4{{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
  r = philox4x32_10(Philox4{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(r.v[0], 0x408f276du);
  EXPECT_EQ(r.v[1], 0x41c83b0eu);
  EXPECT_EQ(r.v[2], 0xa20bc7c6u);
  EXPECT_EQ(r.v[3], 0x6d5451fdu);
  r = philox4x32_10(Philox4{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(r.v[0], 0xd16cfe09u);
  EXPECT_EQ(r.v[1], 0x94fdccebu);
  EXPECT_EQ(r.v[2], 0x5001e420u);
  EXPECT_EQ(r.v[3], 0x24126ea1u);
}

TEST(Philox, StreamsDifferByRankStepTensorAndElement) {
  const auto base = RngStream::make(42, 0, 0, 0);
  EXPECT_NE(base.word(0), RngStream::make(42, 1, 0, 0).word(0));
  EXPECT_NE(base.word(0), RngStream::make(42, 0, 1, 0).word(0));
  EXPECT_NE(base.word(0), RngStream::make(42, 0, 0, 1).word(0));
  EXPECT_NE(base.word(0), base.word(1));
  EXPECT_EQ(base.word(5), RngStream::make(42, 0, 0, 0).word(5));  // pure function of its key
  EXPECT_GE(uniform01(0xffffffffu), 0.0f);
  EXPECT_LT(uniform01(0xffffffffu), 1.0f);
}

TEST(FeistelPermutation, IsABijectionOnEveryDomainSize) {
  for (uint64_t n : {1ull, 2ull, 3ull, 5ull, 17ull, 100ull, 1000ull, 4096ull, 4097ull}) {
    const auto p = FeistelPermutation::make(n, 9, 3, 1);
    std::set<uint64_t> seen;
    for (uint64_t j = 0; j < n; ++j) {
      const uint64_t v = p(j);
      ASSERT_LT(v, n);
      seen.insert(v);
    }
    EXPECT_EQ(seen.size(), n);
  }
  // A different step gives a different selection.
  EXPECT_NE(FeistelPermutation::make(1000, 9, 3, 1)(0) * 1000 + FeistelPermutation::make(1000, 9, 3, 1)(1),
            FeistelPermutation::make(1000, 9, 4, 1)(0) * 1000 + FeistelPermutation::make(1000, 9, 4, 1)(1));
}

}  // namespace
}  // namespace gradcomp::scalar
