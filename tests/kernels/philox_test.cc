// First: the GCC 12 pragmas for philox_batches.h's AVX-512 intrinsics, inlined into this file where the
// build targets AVX-512 (march_intrinsics.h says why).
#include "kernels/cpu/march_intrinsics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "kernels/cpu/bit_pack.h"
#include "kernels/cpu/level_kernels.h"
#include "kernels/cpu/philox_batches.h"
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

TEST(Philox, RoundingUniformsAreTheStreamWordsFieldByField) {
  // The documented layout (kernels/scalar/philox.h): element i's field is the (i mod E)-th b-bit field of
  // word i / E, low bits first, E = 32 / b; u = (field + 1/2) / 2^b. A path that took the words in another
  // order, or the fields from the high end, would still be uniform, and would fail here.
  const auto base = RngStream::make(77, 2, 9, 4);
  for (uint32_t bits : {16u, 8u}) {
    const auto s = base.withRoundingBits(bits);
    const uint64_t fields = 32 / bits;
    for (uint64_t i : std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 15, 16, 17, 1000, (uint64_t{1} << 36) + 7}) {
      const uint32_t field = (base.word(i / fields) >> (bits * (i % fields))) & ((1u << bits) - 1u);
      EXPECT_EQ(roundingUniform(s, i), (static_cast<float>(field) + 0.5f) / static_cast<float>(1u << bits))
          << bits << " bits, element " << i;
    }
  }
  // Any width but 8 reads as the default 16, on every path alike.
  EXPECT_EQ(roundingUniform(base.withRoundingBits(12), 5), roundingUniform(base, 5));
}

TEST(Philox, VectorizedWordsEqualTheScalarCalls) {
  // philoxWordsInOrder (the rotation's signs) against RngStream::block call by call: counts around the
  // AVX-512 path's 64- and 32-call steps and the AVX2 path's 32, from blocks that cross a 2^32 carry, and
  // from the last blocks whose 64 or 32 calls still share the counter's high word (PhiloxSharedRounds:
  // 2^32 - 64 and 2^32 - 32) and the first that do not (one more), under a high word of all ones too.
  const auto s = RngStream::make(987654321ull, 1, 4, 9);
  for (uint64_t block : std::vector<uint64_t>{0, 5, uint64_t{0xffffffe0}, uint64_t{0xffffffe1}, uint64_t{0xffffffc0},
                                              uint64_t{0xffffffc1}, uint64_t{0xfffffffb}, uint64_t{1} << 40,
                                              uint64_t{0xffffffffffffffc0}, uint64_t{0xfffffffeffffffe0}}) {
    for (size_t calls : {1ul, 31ul, 32ul, 33ul, 63ul, 64ul, 65ul, 96ul, 100ul, 128ul, 129ul}) {
      std::vector<uint32_t> words(4 * calls);
      cpu::philoxWordsInOrder(s, block, calls, words.data());
      for (size_t c = 0; c < calls; ++c)
        for (int w = 0; w < 4; ++w)
          ASSERT_EQ(words[4 * c + static_cast<size_t>(w)], s.block(block + c).v[w]) << block << " + " << c << " word " << w;
    }
  }
}

// The batch functions themselves, on every vector width this build has: philoxWordsInOrder takes only
// the widest (an AVX-512 build never calls the AVX2 four-batch step, an AVX2 machine's main path), so each
// width and batch count is checked here against RngStream::block, from blocks where its lanes do and do
// not share the counter's high word (PhiloxSharedRounds): 2^32 - 8L K and one more, for L lanes, K batches.
TEST(Philox, EveryBatchWidthEqualsTheScalarCalls) {
#if !defined(__AVX2__)
  GTEST_SKIP() << "no vector Philox in this build (plain x86-64)";
#else
  const auto s = RngStream::make(55555ull, 6, 7, 8);
  const auto check = [&](const char* name, size_t calls, uint64_t block, const uint32_t* words) {
    for (size_t c = 0; c < calls; ++c)
      for (int w = 0; w < 4; ++w)
        ASSERT_EQ(words[4 * c + static_cast<size_t>(w)], s.block(block + c).v[w]) << name << " from " << block << " + " << c;
  };
  std::vector<uint64_t> starts{0, 3, uint64_t{1} << 40, uint64_t{0xfffffffeffffff00}};
  for (const uint64_t calls : {8u, 16u, 32u, 64u})
    for (const uint64_t back : {calls, calls - 1, uint64_t{1}}) starts.push_back((uint64_t{1} << 32) - back);
  alignas(64) uint32_t words[4 * 64];
  for (const uint64_t block : starts) {
#if defined(__AVX2__)
    cpu::philox8InOrder<1>(s, block, words);
    check("8 lanes x 1", 8, block, words);
    cpu::philox8InOrder<4>(s, block, words);
    check("8 lanes x 4", 32, block, words);
#endif
#if defined(__AVX512F__)
    cpu::philox16InOrder<1>(s, block, words);
    check("16 lanes x 1", 16, block, words);
    cpu::philox16InOrder<2>(s, block, words);
    check("16 lanes x 2", 32, block, words);
    cpu::philox16InOrder<4>(s, block, words);
    check("16 lanes x 4", 64, block, words);
#endif
  }
#endif
}

TEST(BitPack, GroupPathEqualsBitByBitDefinitionForEveryWidth) {
  for (int bits = 1; bits <= 8; ++bits) {
    for (size_t n : {1ul, 7ul, 8ul, 9ul, 63ul, 64ul, 1001ul}) {
      std::vector<uint8_t> codes(n), back(n);
      for (size_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>((i * 37 + 11) & ((1u << bits) - 1));
      std::vector<uint8_t> packed(cpu::packedBytes(n, bits), 0xff);
      cpu::packBits(codes.data(), n, bits, packed.data());
      for (size_t i = 0; i < n * static_cast<size_t>(bits); ++i) {  // bit i of the stream, LSB first
        const unsigned expect = (codes[i / bits] >> (i % bits)) & 1u;
        ASSERT_EQ((packed[i / 8] >> (i % 8)) & 1u, expect) << bits << " bits, n " << n << ", bit " << i;
      }
      const size_t used = n * static_cast<size_t>(bits);
      if (used % 8) {
        EXPECT_EQ(packed.back() >> (used % 8), 0) << "tail bits must be zero";
      }
      cpu::unpackBits(packed.data(), n, bits, back.data());
      EXPECT_EQ(back, codes) << bits << " bits, n " << n;
    }
  }
}

TEST(LevelKernels, VectorPathsEqualTheScalarFormulas) {
  // n = 8k + 5: the SIMD body and the scalar tail both run; every code checked against the formula.
  const size_t n = 8 * 100 + 5;
  std::vector<float> x(n), u(n);
  for (size_t i = 0; i < n; ++i) u[i] = roundingUniform(RngStream::make(1, 0, 0, 0), i);
  for (size_t i = 0; i < n; ++i) x[i] = (static_cast<float>(i % 17) - 8.0f) * 0.37f;
  x[3] = -0.0f;
  for (int bits : {2, 4, 8}) {
    std::vector<uint8_t> codes(n);
    const float norm = cpu::encodeQsgdBlock(x.data(), n, bits, u.data(), codes.data());
    const int s = (1 << (bits - 1)) - 1;
    for (size_t i = 0; i < n; ++i) {
      float level = std::floor(std::fabs(x[i]) * (static_cast<float>(s) / norm) + u[i]);
      level = std::min(level, static_cast<float>(s));
      const unsigned expect = ((std::signbit(x[i]) && level > 0) << (bits - 1)) | static_cast<unsigned>(level);
      ASSERT_EQ(codes[i], expect) << bits << " bits, i " << i;
    }
  }
  std::vector<uint8_t> tern(n);
  const float m = cpu::encodeTernBlock(x.data(), n, u.data(), tern.data());
  std::vector<float> dec(n), acc(n, 1.0f);
  cpu::decodeTernBlock(tern.data(), n, m, dec.data(), false);
  cpu::decodeTernBlock(tern.data(), n, m, acc.data(), true);
  for (size_t i = 0; i < n; ++i) {
    const bool keep = u[i] < std::fabs(x[i]) * (1.0f / m);
    ASSERT_EQ(tern[i], keep ? (std::signbit(x[i]) ? 2 : 1) : 0) << i;
    const float v = tern[i] == 1 ? m : tern[i] == 2 ? -m : 0.0f;
    ASSERT_EQ(dec[i], v) << i;
    ASSERT_EQ(acc[i], 1.0f + v) << i;
  }
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
