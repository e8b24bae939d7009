#include "kernels/cpu/microscaling_kernels.h"

#include <algorithm>

#include "kernels/cpu/block_scale_kernels.h"

namespace gradcomp::cpu {

using namespace scalar;

float absMax(const float* x, size_t n) { return blockAmax(x, n); }

float absMaxOfSum(const float* g, const float* e, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, absBits(g[i] + e[i]));
  return bitsToFloat(m);
}

uint64_t encodeMxBlocks(const float* x, size_t n, size_t blockSize, ElementFormat fmt, uint8_t* codes,
                        uint8_t* scaleCodes) {
  const ElementSpec s = elementSpec(fmt);
  const uint32_t overflow = elementOverflowBits(s);
  uint64_t saturated = 0;
  for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) {
    const size_t len = std::min(blockSize, n - b0);
    const uint8_t scaleCode = mxSharedScaleCode(blockAmax(x + b0, len), s);
    scaleCodes[block] = scaleCode;
    // x / 2^e as a product with 2^-e: exact (a power of two, and x / X < 2^(emax + 1) never overflows).
    const float inv = mxInverseScale(scaleCode);
    for (size_t i = 0; i < len; ++i) {
      const float v = x[b0 + i] * inv;
      saturated += absBits(v) >= overflow;
      codes[b0 + i] = floatToElement(v, s);
    }
  }
  return saturated;
}

void decodeMxBlock(const uint8_t* codes, size_t n, ElementFormat fmt, uint8_t scaleCode, float* out, bool accumulate) {
  const ElementSpec s = elementSpec(fmt);
  const float scale = e8m0ToFloat(scaleCode);
  // Each code's value once: a 256-entry (at most) table beats the bit manipulation per element.
  float table[256];
  const int codesInFormat = 1 << s.bits;
  for (int c = 0; c < codesInFormat; ++c) table[c] = mulRn(elementToFloat(static_cast<uint8_t>(c), s, fmt), scale);
  if (accumulate) {
    for (size_t i = 0; i < n; ++i) out[i] += table[codes[i]];
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = table[codes[i]];
  }
}

uint64_t encodeNvfp4Blocks(const float* x, size_t n, size_t blockSize, float t, uint8_t* codes, uint8_t* scaleCodes) {
  const ElementSpec s = elementSpec(ElementFormat::E2M1);
  const uint32_t overflow = elementOverflowBits(s);
  uint64_t saturated = 0;
  for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) {
    const size_t len = std::min(blockSize, n - b0);
    const uint8_t scaleCode = nvfp4BlockScaleCode(blockAmax(x + b0, len), t);
    scaleCodes[block] = scaleCode;
    const float factor = nvfp4BlockFactor(scaleCode, t);
    if (factor == 0.0f) {  // the block is below E4M3's smallest scale: every value decodes to 0
      std::fill(codes + b0, codes + b0 + len, uint8_t{0});
      continue;
    }
    for (size_t i = 0; i < len; ++i) {
      const float v = x[b0 + i] / factor;  // divided, not multiplied by a reciprocal: the reference's rounding
      saturated += absBits(v) >= overflow;
      codes[b0 + i] = floatToElement(v, s);
    }
  }
  return saturated;
}

void decodeNvfp4Block(const uint8_t* codes, size_t n, uint8_t scaleCode, float t, float* out, bool accumulate) {
  const ElementSpec s = elementSpec(ElementFormat::E2M1);
  const float factor = nvfp4BlockFactor(scaleCode, t);
  float table[16];
  for (int c = 0; c < 16; ++c) table[c] = mulRn(elementToFloat(static_cast<uint8_t>(c), s, ElementFormat::E2M1), factor);
  if (accumulate) {
    for (size_t i = 0; i < n; ++i) out[i] += table[codes[i]];
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = table[codes[i]];
  }
}

}  // namespace gradcomp::cpu
