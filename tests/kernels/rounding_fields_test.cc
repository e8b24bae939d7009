// fillRoundingFields / RoundingFields (kernels/cpu/rounding_fields.h): the fields the stochastic codecs'
// codes widen in registers are the stream's rounding uniforms, element for element, from any start, at both widths, with
// or without the read-ahead prefetches interleaved with the Philox rounds.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/rounding_fields.h"
#include "kernels/scalar/philox.h"

namespace gradcomp::cpu {
namespace {

// Element i's field as a vector load reads it: little-endian bytes at bytesAt(i).
uint32_t fieldFromBytes(const RoundingFields& f, size_t i) {
  const uint8_t* p = f.bytesAt(i);
  return f.bits == 8 ? p[0] : static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8;
}

TEST(RoundingFields, EveryElementIsTheStreamsUniformFromAnyStart) {
  // P elements per Philox call (8 at 16 bits, 16 at 8). Starts: aligned, inside a call, across a 2^32
  // carry of the call counter, and far out; lengths around the AVX2 path's 32-call step and the AVX-512
  // path's 64-call step (32 P and 64 P values), plus short tails. Each with no read-ahead, and with one
  // into L1 and into L2 (the prefetches run between the rounds and must leave the words alone).
  std::vector<float> ahead(4200, 1.0f);
  for (const uint32_t bits : {16u, 8u}) {
    const uint64_t P = 4 * 32 / bits;
    const auto s = scalar::RngStream::make(20261206ull, 3, 11, 7).withRoundingBits(bits);
    for (const uint64_t first : std::vector<uint64_t>{0, 1, P - 1, 5 * P + 3, P * uint64_t{0xfffffff0} + 1,
                                                      P * uint64_t{0xffffffe0} - 2, uint64_t{1} << 40}) {
      for (const size_t n : {0ul, 1ul, 7ul, 31ul, 32 * P - 1, 32 * P, 32 * P + 1, 64 * P - 3, 64 * P, 64 * P + 5,
                             96 * P + 1, 4097ul}) {
        for (int mode = 0; mode < 3; ++mode) {
          std::vector<uint32_t> words;
          const PrefetchInto into = mode == 1 ? PrefetchInto::L1 : PrefetchInto::L2;
          const RoundingFields f = mode == 0 ? fillRoundingFields(s, first, n, words)
                                             : fillRoundingFields(s, first, n, words, ahead.data(), into);
          ASSERT_EQ(f.bits, bits);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(f.uniform(i), scalar::roundingUniform(s, first + i))
                << bits << " bits, first " << first << ", n " << n << ", element " << i << ", read-ahead mode " << mode;
            ASSERT_EQ(fieldFromBytes(f, i), f.field(i)) << bits << " bits, first " << first << ", element " << i;
          }
        }
      }
    }
  }
}

TEST(RoundingFields, AViewFromAnElementIsThatElementsFields) {
  const auto s = scalar::RngStream::make(5, 0, 2, 9);
  std::vector<uint32_t> words;
  const RoundingFields f = fillRoundingFields(s, 13, 1000, words);
  for (const size_t offset : {0ul, 1ul, 64ul, 517ul}) {
    const RoundingFields g = f.from(offset);
    for (size_t i = 0; i + offset < 1000; i += 37)
      ASSERT_EQ(g.uniform(i), scalar::roundingUniform(s, 13 + offset + i)) << offset;
  }
}

TEST(RoundingFields, AGrownBufferServesALaterShorterRun) {
  // The codec keeps one buffer per thread: a long tile, then a short last one, then a long one again.
  const auto s = scalar::RngStream::make(8, 1, 3, 4);
  std::vector<uint32_t> words;
  for (const auto& [first, n] : std::vector<std::pair<uint64_t, size_t>>{{0, 4096}, {4096, 37}, {4133, 2048}}) {
    const RoundingFields f = fillRoundingFields(s, first, n, words);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(f.uniform(i), scalar::roundingUniform(s, first + i)) << first << " + " << i;
  }
}

TEST(RoundingFields, AnyWidthButEightReadsAsSixteen) {
  // As scalar::roundingUniform reads it: a stream asking for 12-bit fields gets the default 16.
  const auto s = scalar::RngStream::make(77, 2, 9, 4).withRoundingBits(12);
  std::vector<uint32_t> words;
  const RoundingFields f = fillRoundingFields(s, 3, 600, words);
  EXPECT_EQ(f.bits, 16u);
  for (size_t i = 0; i < 600; ++i) ASSERT_EQ(f.uniform(i), scalar::roundingUniform(s, 3 + i)) << i;
}

TEST(RoundingFields, TheKernelsSeeTheWidthAndAnEmptyViewAsNearestRounding) {
  // withFieldWidth hands the kernels the width as a constant: 8 or 16 from filled views, 0 from a view
  // with no words (the int kernels' nearest rounding), also after from(), which keeps it empty.
  const auto s = scalar::RngStream::make(5, 0, 1, 2);
  std::vector<uint32_t> words;
  const auto width = [](const RoundingFields& f) { return withFieldWidth(f, [](auto bits) { return decltype(bits)::value; }); };
  EXPECT_EQ(width(fillRoundingFields(s.withRoundingBits(8), 0, 64, words)), 8);
  EXPECT_EQ(width(fillRoundingFields(s, 0, 64, words)), 16);
  EXPECT_TRUE(fillRoundingFields(s, 0, 64, words).drawn());
  const RoundingFields none;
  EXPECT_FALSE(none.drawn());
  EXPECT_FALSE(none.from(100).drawn());
  EXPECT_EQ(width(none), 0);
  EXPECT_EQ(width(none.from(100)), 0);
}

}  // namespace
}  // namespace gradcomp::cpu
