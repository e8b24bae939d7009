// The AVX2 code-packing steps whose clamps no finite block reaches through the encoders (the scaled
// maximum passes the top code by at most 2^-17 of a step, below every rounding uniform's gap:
// block_kernel_paths_test.cc), so their guards are checked here on the steps themselves, with codes at
// and past every edge.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "kernels/cpu/avx2_block_steps.h"

namespace gradcomp::cpu {
namespace {

#if defined(__AVX2__)

__m256i lanesOf(const int32_t* v) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v)); }

// int8: 32 rounded values, any int32, to codes in [-127, 127] in element order (-128 is never a code: the
// decoder rejects it).
TEST(Avx2BlockSteps, Int8CodeBytesClampToPlusMinus127InElementOrder) {
  const int32_t edges[] = {INT32_MIN, -70000, -32769, -129, -128, -127, -1, 0, 1, 126, 127, 128, 255, 32768, INT32_MAX};
  std::vector<int32_t> values(32);
  for (size_t i = 0; i < 32; ++i) values[i] = i < std::size(edges) ? edges[i] : static_cast<int32_t>(9 * i) - 150;
  int8_t out[33];
  out[32] = 0x55;  // the store stays within 32 bytes
  storeInt8CodeBytes32(lanesOf(&values[0]), lanesOf(&values[8]), lanesOf(&values[16]), lanesOf(&values[24]), out);
  for (size_t i = 0; i < 32; ++i)
    EXPECT_EQ(out[i], std::clamp(values[i], -127, 127)) << "element " << i << " (" << values[i] << ")";
  EXPECT_EQ(out[32], 0x55);
}

// int4 / qsgd-style nibbles: 64 codes in [-128, 127] clamped to [-top, top] and stored as 4-bit two's
// complement, element 2k in byte k's low nibble: -8 and beyond must come out as -top, never wrap.
TEST(Avx2BlockSteps, ClampedNibblesNeverWrapAndKeepElementOrder) {
  const int32_t edges[] = {-128, -127, -9, -8, -7, -6, -1, 0, 1, 6, 7, 8, 9, 127};
  std::vector<int32_t> values(64);
  for (size_t i = 0; i < 64; ++i) values[i] = edges[(i * 5 + i / 14) % std::size(edges)];
  __m256i lanes[8];
  for (size_t v = 0; v < 8; ++v) lanes[v] = lanesOf(&values[8 * v]);
  for (const int8_t top : {int8_t{7}, int8_t{3}}) {
    uint8_t out[33];
    out[32] = 0xa5;
    storeClampedNibbles64(lanes, top, out);
    for (size_t i = 0; i < 64; ++i) {
      const int want = std::clamp<int>(values[i], -top, top);
      EXPECT_EQ((out[i / 2] >> (4 * (i % 2))) & 0xfu, static_cast<unsigned>(want) & 0xfu)
          << "top " << int{top} << ", element " << i << " (" << values[i] << ")";
    }
    EXPECT_EQ(out[32], 0xa5);
  }
}

#endif  // a build without AVX2 (CI's plain x86-64 sanitizer stage) has no AVX2 steps, so no tests here

}  // namespace
}  // namespace gradcomp::cpu
