// The per-element and per-block math the CUDA level kernels run (kernels/scalar/level_codes.h), pinned
// bit for bit to the CPU reference here on the host: block statistics in the CPU's lane order, codes,
// decoded values, and the word-at-a-time bit packing against cpu::packBits / unpackBits. The CUDA
// kernels only add the thread layout on top (run by gradcomp_cuda_codec_tests where a GPU is).
// What these tests cannot see: the summation order of the block statistics. Reassociating the double
// lane sums changes them by an ulp of a double, which the final conversion to fp32 almost never shows
// (tried: swapping the lane tree passes here); the order is kept the CPU's by construction instead.
#include "kernels/scalar/level_codes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <cmath>
#include <bit>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/bit_pack.h"
#include "kernels/cpu/level_kernels.h"
#include "kernels/cpu/sign_kernels.h"
#include "kernels/scalar/philox.h"

namespace gradcomp {
namespace {

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Block {
  std::vector<float> g, e, c;
};

Block makeBlock(size_t len, uint64_t seed, bool withResidual) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  Block b;
  b.g.resize(len);
  b.e.assign(len, 0.0f);
  b.c.resize(len);
  for (size_t i = 0; i < len; ++i) {
    b.g[i] = normal(rng) * (i % 17 == 3 ? 1e4f : 1.0f);
    if (i % 13 == 5) b.g[i] = 0.0f;
    if (i % 19 == 7) b.g[i] = -0.0f;
    if (withResidual) b.e[i] = 0.1f * normal(rng);
    b.c[i] = b.g[i] + b.e[i];
  }
  return b;
}

const size_t kLengths[] = {1, 3, 7, 8, 9, 31, 100, 512, 1000, 1024};

TEST(LevelCodes, BlockStatisticsMatchTheCpuLaneOrder) {
  for (size_t len : kLengths)
    for (bool withResidual : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "len=" << len << " residual=" << withResidual);
      const Block b = makeBlock(len, len * 7 + withResidual, withResidual);
      const float* e = withResidual ? b.e.data() : nullptr;
      // qsgd: L2 norm over 4 lanes.
      const float norm = scalar::l2NormOfLanes(
          scalar::laneSumSquares(b.g.data(), e, len, 0), scalar::laneSumSquares(b.g.data(), e, len, 1),
          scalar::laneSumSquares(b.g.data(), e, len, 2), scalar::laneSumSquares(b.g.data(), e, len, 3), 7);
      EXPECT_EQ(bitsOf(norm), bitsOf(cpu::blockL2Norm(b.c.data(), len, 7)));
      // sign: mean |c| over 8 lanes.
      double lanes[8];
      for (unsigned j = 0; j < 8; ++j) lanes[j] = scalar::laneSumAbs(b.g.data(), e, len, j);
      std::vector<uint8_t> bits(len / 8 + 2, 0);
      EXPECT_EQ(bitsOf(scalar::meanOf(scalar::sumOfLanes8(lanes), len)),
                bitsOf(cpu::encodeSignBlock(b.c.data(), len, 0, bits.data())));
      // onebit: the means of the two groups.
      double pos[8], neg[8];
      uint64_t numPos = 0;
      for (unsigned j = 0; j < 8; ++j) {
        const scalar::OneBitLane l = scalar::laneOneBit(b.g.data(), e, len, j);
        pos[j] = l.positive;
        neg[j] = l.negative;
        numPos += l.numPositive;
      }
      const cpu::OneBitMeans m = cpu::encodeOneBitBlock(b.c.data(), len, 0, bits.data());
      EXPECT_EQ(bitsOf(scalar::meanOf(scalar::sumOfLanes8(pos), numPos)), bitsOf(m.positive));
      EXPECT_EQ(bitsOf(scalar::meanOf(scalar::sumOfLanes8(neg), len - numPos)), bitsOf(m.negative));
    }
}

TEST(LevelCodes, QsgdAndTernGradCodesAndValuesMatchTheCpu) {
  const auto stream = scalar::RngStream::make(5, 1, 2, 3);
  // Blocks at the edges of the fp32 range too: norms and maxima below 2^-100 (subnormal ones included) and
  // above 2^100 take the power-of-two normalized ratio (scale_limits.h), on the CPU's scalar tail.
  for (const float magnitude : {1.0f, 1e-33f, 1e-41f, 1e34f, 1e-4f * 3.4e38f})
  for (size_t len : kLengths) {
    Block b = makeBlock(len, len, false);
    for (float& v : b.c) v = std::min(std::max(v * magnitude, -3.4e38f), 3.4e38f);
    std::vector<float> u(len), decoded(len);
    std::vector<uint8_t> codes(len);
    for (size_t i = 0; i < len; ++i) u[i] = scalar::roundingUniform(stream, 1000 + i);
    for (int bits = 2; bits <= 8; ++bits) {
      SCOPED_TRACE(::testing::Message() << "len=" << len << " bits=" << bits << " magnitude=" << magnitude);
      const float norm = cpu::encodeQsgdBlock(b.c.data(), len, bits, u.data(), codes.data());
      cpu::decodeQsgdBlock(codes.data(), len, bits, norm, decoded.data(), false);
      for (size_t i = 0; i < len; ++i) {
        ASSERT_EQ(scalar::qsgdCode(b.c[i], norm, bits, u[i]), codes[i]) << i;
        ASSERT_EQ(bitsOf(scalar::qsgdValue(codes[i], norm, bits)), bitsOf(decoded[i])) << i;
      }
    }
    SCOPED_TRACE(::testing::Message() << "terngrad len=" << len);
    const float maxAbs = cpu::encodeTernBlock(b.c.data(), len, u.data(), codes.data());
    cpu::decodeTernBlock(codes.data(), len, maxAbs, decoded.data(), false);
    for (size_t i = 0; i < len; ++i) {
      ASSERT_EQ(scalar::ternCode(b.c[i], maxAbs, u[i]), codes[i]) << i;
      ASSERT_EQ(bitsOf(scalar::ternValue(codes[i], maxAbs)), bitsOf(decoded[i])) << i;
    }
  }
}

TEST(LevelCodes, SignAndOneBitBitsAndValuesMatchTheCpu) {
  for (size_t len : kLengths)
    for (uint64_t first : {uint64_t{0}, uint64_t{8}, uint64_t{3}}) {
      SCOPED_TRACE(::testing::Message() << "len=" << len << " first=" << first);
      const Block b = makeBlock(len, len + first, false);
      std::vector<uint8_t> bits(len / 8 + 3, 0);
      std::vector<float> decoded(len);
      const float scale = cpu::encodeSignBlock(b.c.data(), len, first, bits.data());
      cpu::decodeSignBlock(bits.data(), first % 8, len, scale, decoded.data(), false);
      for (size_t i = 0; i < len; ++i) {
        const uint32_t bit = (bits[(first % 8 + i) / 8] >> ((first % 8 + i) % 8)) & 1u;
        ASSERT_EQ(scalar::signCode(b.c[i], first + i), bit) << i;
        ASSERT_EQ(bitsOf(scalar::twoValued(bit, scale, -scale)), bitsOf(decoded[i])) << i;
      }
      std::fill(bits.begin(), bits.end(), 0);
      const cpu::OneBitMeans m = cpu::encodeOneBitBlock(b.c.data(), len, first % 8, bits.data());
      cpu::decodeOneBitBlock(bits.data(), first % 8, len, m, decoded.data(), false);
      for (size_t i = 0; i < len; ++i) {
        const uint32_t bit = (bits[(first % 8 + i) / 8] >> ((first % 8 + i) % 8)) & 1u;
        ASSERT_EQ(scalar::oneBitCode(b.c[i]), bit) << i;
        ASSERT_EQ(bitsOf(scalar::twoValued(bit, m.positive, m.negative)), bitsOf(decoded[i])) << i;
      }
    }
}

// The tile encoder (four blocks' sums interleaved) against encodeSignBlock block by block: the same bits
// (bytes around them untouched), the same scales bit for bit, and the largest |x| it returns for the
// codec's NaN/Inf check, for block sizes that take the interleaved loop (multiples of 8) and ones that do
// not, starts that are byte-aligned and not, lengths with a short last block and fewer than four blocks.
TEST(LevelCodes, SignTileEncoderEqualsTheBlockEncoder) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  size_t compared = 0;
  for (const size_t blockSize : {size_t{1024}, size_t{64}, size_t{8}, size_t{24}, size_t{1000}, size_t{7}})
    for (const uint64_t first : {uint64_t{0}, uint64_t{8 * 1024}, uint64_t{3}})
      for (const size_t n : {blockSize * 4, blockSize * 9 - 1, blockSize * 3, blockSize * 8 + 5, size_t{1}})
        for (const float special : {0.0f, std::numeric_limits<float>::quiet_NaN(), -INFINITY}) {
          SCOPED_TRACE(::testing::Message() << "block " << blockSize << " first " << first << " n " << n);
          std::vector<float> x(n);
          for (size_t i = 0; i < n; ++i) x[i] = rng() % 9 == 0 ? 0.0f : normal(rng);  // zeros: the even/odd rule
          x[n - 1 - n / 3] = special == 0.0f ? -5.5f : special;
          const size_t blocks = (n + blockSize - 1) / blockSize, bytes = (first % 8 + n) / 8 + 2;
          std::vector<uint8_t> got(bytes, 0xa5), want(bytes, 0xa5);
          std::vector<float> scales(blocks, -1.0f), wantScales(blocks);
          uint32_t largest = 0;
          cpu::encodeSignBlocks(x.data(), n, blockSize, first, got.data(), scales.data(), &largest);
          uint32_t wantLargest = 0;
          for (const float v : x) wantLargest = std::max(wantLargest, std::bit_cast<uint32_t>(v) & 0x7fffffffu);
          ASSERT_EQ(largest >= 0x7f800000u, wantLargest >= 0x7f800000u);
          if (wantLargest >= 0x7f800000u) continue;  // the codec discards the output
          ASSERT_EQ(largest, wantLargest);
          for (size_t b = 0; b < blocks; ++b) {
            const size_t b0 = b * blockSize, len = std::min(blockSize, n - b0);
            wantScales[b] = cpu::encodeSignBlock(x.data() + b0, len, first + b0, want.data() + (first % 8 + b0) / 8);
            ASSERT_EQ(bitsOf(scales[b]), bitsOf(wantScales[b])) << "block " << b;
          }
          ASSERT_EQ(got, want);
          std::vector<uint8_t> again(bytes, 0xa5);  // without the maximum asked for: the same output
          cpu::encodeSignBlocks(x.data(), n, blockSize, first, again.data(), scales.data());
          ASSERT_EQ(again, want);
          ++compared;
        }
  EXPECT_EQ(compared, 90u);  // 6 block sizes x 3 starts x 5 lengths, the finite case of each
}

TEST(LevelCodes, WordPackingMatchesTheCpuPackerForEveryWidth) {
  std::mt19937 rng(3);
  for (int bits = 1; bits <= 8; ++bits)
    for (size_t n : {size_t{1}, size_t{5}, size_t{8}, size_t{31}, size_t{32}, size_t{33}, size_t{100}, size_t{1027}}) {
      SCOPED_TRACE(::testing::Message() << "bits=" << bits << " n=" << n);
      std::vector<uint8_t> codes(n);
      for (auto& c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1u));
      const size_t bytes = (n * bits + 7) / 8, words = (n * bits + 31) / 32;
      std::vector<uint8_t> cpu(words * 4 + 8, 0xee);
      cpu::packBits(codes.data(), n, bits, cpu.data());
      std::vector<uint8_t> fromWords(words * 4);
      for (size_t w = 0; w < words; ++w) {
        const uint32_t word = scalar::packedWord(codes.data(), n, bits, w);
        std::memcpy(fromWords.data() + 4 * w, &word, 4);  // little-endian, as the device stores it
      }
      EXPECT_EQ(std::vector<uint8_t>(fromWords.begin(), fromWords.begin() + bytes),
                std::vector<uint8_t>(cpu.begin(), cpu.begin() + bytes));
      for (size_t b = bytes; b < words * 4; ++b) EXPECT_EQ(fromWords[b], 0) << "bits past the last element";
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(scalar::unpackedCode(fromWords.data(), i, bits), codes[i]) << i;
    }
}

}  // namespace
}  // namespace gradcomp
