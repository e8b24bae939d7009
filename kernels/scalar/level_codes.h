// Per-element and per-block math of the bit-packed codecs (qsgd, terngrad, sign, onebit) and the
// LSB-first bit packing, written once for the CUDA kernels (kernels/cuda/level_kernels.cu) and pinned
// to the CPU reference (kernels/cpu/level_kernels.h, sign_kernels.h, bit_pack.h) by host tests
// (tests/kernels/level_codes_test.cc): what can be checked here without a GPU is checked here.
//
// Block statistics follow the CPU's summation order exactly: lane j of L takes the block's elements
// j, j+L, j+2L, ... in order, in double; lanes combine in a fixed tree. The CUDA kernel runs one lane
// per thread and combines with shuffles; laneSum* is what each lane computes.
#pragma once

#include <cmath>

#include "kernels/scalar/float_formats.h"
#include "kernels/scalar/scale_limits.h"

namespace gradcomp::scalar {

GRADCOMP_HD float absRn(float c) { return bitsToFloat(absBits(c)); }  // fabsf, exactly
GRADCOMP_HD bool signBit(float c) { return floatBits(c) >> 31; }         // std::signbit (c is never NaN here)
GRADCOMP_HD float floorRn(float v) {
#if defined(__CUDA_ARCH__)
  return floorf(v);
#else
  return std::floor(v);
#endif
}

// c = g + e (e may be null), the fused error-feedback input.
GRADCOMP_HD float addend(const float* g, const float* e, uint64_t i) { return e ? addRn(g[i], e[i]) : g[i]; }

// ---------------------------------------------------------------- block statistics

// Lane `lane` of 4 of the block's sum of squares (qsgd's L2 norm). The product of two floats is exact
// in double, so only the additions round.
GRADCOMP_HD double laneSumSquares(const float* g, const float* e, uint64_t len, unsigned lane) {
  double sum = 0;
  for (uint64_t i = lane; i < len; i += 4) {
    const double c = static_cast<double>(addend(g, e, i));
    sum = sum + c * c;
  }
  return sum;
}

// The wire norm of a qsgd block with `levels` levels from its four lanes (scale_limits.h: capped so that
// it decodes to finite values).
GRADCOMP_HD float l2NormOfLanes(double l0, double l1, double l2, double l3, int levels) {
  return qsgdWireNorm((l0 + l1) + (l2 + l3), levels);
}

// Lane `lane` of 8 of the block's sum of |c| (sign's scale).
GRADCOMP_HD double laneSumAbs(const float* g, const float* e, uint64_t len, unsigned lane) {
  double sum = 0;
  for (uint64_t i = lane; i < len; i += 8) sum = sum + static_cast<double>(absRn(addend(g, e, i)));
  return sum;
}

// Lane `lane` of 8 of onebit's sums: of the c >= 0 (-0 included) and of the c < 0, and how many c >= 0.
struct OneBitLane {
  double positive = 0, negative = 0;
  uint64_t numPositive = 0;
};
GRADCOMP_HD OneBitLane laneOneBit(const float* g, const float* e, uint64_t len, unsigned lane) {
  OneBitLane l;
  for (uint64_t i = lane; i < len; i += 8) {
    const float c = addend(g, e, i);
    const bool p = !(c < 0.0f);
    l.numPositive += p;
    l.positive = l.positive + static_cast<double>(p ? c : 0.0f);
    l.negative = l.negative + static_cast<double>(p ? 0.0f : c);
  }
  return l;
}

// The CPU's tree over 8 lanes.
GRADCOMP_HD double sumOfLanes8(const double* l) { return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])); }

GRADCOMP_HD float meanOf(double total, uint64_t count) {
  return count ? static_cast<float>(total / static_cast<double>(count)) : 0.0f;
}

// ---------------------------------------------------------------- codes and decoded values

GRADCOMP_HD int qsgdLevels(int bits) { return (1 << (bits - 1)) - 1; }

// QSGD with s = 2^(bits-1) - 1 levels: sign << (bits-1) | floor(|c| / norm * s + u), the level clamped
// to s; a zero level carries no sign. |c| * s / norm as scale_limits.h's ratioScaling computes it (the
// plain fl(|c| * fl(s / norm)) for norms in 2^-100 .. 2^100; normalized by a power of two outside).
GRADCOMP_HD uint32_t qsgdCode(float c, const RatioScaling& toLevel, int bits, float u) {
  const int s = qsgdLevels(bits);
  float level = floorRn(addRn(scaledRatio(absRn(c), toLevel), u));
  level = level > static_cast<float>(s) ? static_cast<float>(s) : level;
  const uint32_t negative = signBit(c) && level > 0.0f;
  return (negative << (bits - 1)) | static_cast<uint32_t>(level);
}

GRADCOMP_HD uint32_t qsgdCode(float c, float norm, int bits, float u) {
  return qsgdCode(c, ratioScaling(static_cast<float>(qsgdLevels(bits)), norm), bits, u);
}

GRADCOMP_HD float qsgdValue(uint32_t code, float norm, int bits) {
  const int s = qsgdLevels(bits);
  const float unit = divRn(norm, static_cast<float>(s));
  const float mag = mulRn(static_cast<float>(code & ((1u << (bits - 1)) - 1u)), unit);
  return (code >> (bits - 1)) ? -mag : mag;
}

// TernGrad: 1 -> +maxAbs, 2 -> -maxAbs (the sign bit decides, as std::signbit), 0 -> 0; nonzero with
// probability |c| / maxAbs.
GRADCOMP_HD uint32_t ternCode(float c, const RatioScaling& inv, float u) {
  const bool keep = u < scaledRatio(absRn(c), inv);
  return keep ? (signBit(c) ? 2u : 1u) : 0u;
}
GRADCOMP_HD uint32_t ternCode(float c, float maxAbs, float u) { return ternCode(c, ratioScaling(1.0f, maxAbs), u); }

GRADCOMP_HD float ternValue(uint32_t code, float maxAbs) { return code == 1 ? maxAbs : (code == 2 ? -maxAbs : 0.0f); }

// sign: c > 0; a zero is 1 at even and 0 at odd global index (zeros decode to +-scale in equal numbers).
GRADCOMP_HD uint32_t signCode(float c, uint64_t globalIndex) {
  return c > 0.0f || (c == 0.0f && (globalIndex & 1u) == 0);
}

// onebit: c >= 0 (-0 included).
GRADCOMP_HD uint32_t oneBitCode(float c) { return !(c < 0.0f); }

// The two-valued decoders (sign, onebit): + 0.0f turns -0 into +0 as the CPU does.
GRADCOMP_HD float twoValued(uint32_t bit, float one, float zero) { return addRn(bit ? one : zero, 0.0f); }

// ---------------------------------------------------------------- LSB-first bit packing

// 32-bit word w of the stream holding n codes of `bits` (1..8) bits each: element i occupies bits
// [i*bits, i*bits + bits). Elements straddling the word's edges contribute their part; bits past the
// last element are 0.
GRADCOMP_HD uint32_t packedWord(const uint8_t* codes, uint64_t n, int bits, uint64_t w) {
  const uint64_t bit0 = 32 * w;
  uint64_t end = (bit0 + 32 + bits - 1) / bits;  // first element starting at or past the next word
  if (end > n) end = n;
  uint32_t word = 0;
  for (uint64_t i = bit0 / bits; i < end; ++i) {
    const int64_t shift = static_cast<int64_t>(i * bits) - static_cast<int64_t>(bit0);
    const uint32_t code = codes[i];
    word |= shift >= 0 ? code << shift : code >> -shift;
  }
  return word;
}

// Code of element i from a packed byte stream (reads the second byte only when the code straddles).
GRADCOMP_HD uint32_t unpackedCode(const uint8_t* packed, uint64_t i, int bits) {
  const uint64_t p = i * static_cast<uint64_t>(bits);
  const unsigned shift = p & 7u;
  uint32_t raw = packed[p >> 3];
  if (shift + bits > 8) raw |= static_cast<uint32_t>(packed[(p >> 3) + 1]) << 8;
  return (raw >> shift) & ((1u << bits) - 1u);
}

}  // namespace gradcomp::scalar
