#include "kernels/cpu/sign_kernels.h"

#include <cmath>
#include <vector>

namespace gradcomp::cpu {

void writeBits(const uint8_t* flags, size_t n, size_t bitOffset, uint8_t* bits) {
  size_t i = 0;
  // Leading partial byte (blocks that are not multiples of 8 start mid-byte).
  for (; i < n && ((bitOffset + i) & 7u); ++i) {
    const size_t b = bitOffset + i;
    bits[b >> 3] = static_cast<uint8_t>((bits[b >> 3] & ~(1u << (b & 7))) | (flags[i] << (b & 7)));
  }
  for (; i + 8 <= n; i += 8) {
    uint32_t byte = 0;
    for (int j = 0; j < 8; ++j) byte |= static_cast<uint32_t>(flags[i + j]) << j;
    bits[(bitOffset + i) >> 3] = static_cast<uint8_t>(byte);
  }
  for (; i < n; ++i) {
    const size_t b = bitOffset + i;
    bits[b >> 3] = static_cast<uint8_t>((bits[b >> 3] & ~(1u << (b & 7))) | (flags[i] << (b & 7)));
  }
}

namespace {

// Sum of |x| in double over 4 interleaved lanes, combined as (l0+l1)+(l2+l3): a fixed order.
double absSum(const float* x, size_t n) {
  double lane[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) lane[j] += std::fabs(x[i + j]);
  for (int j = 0; i < n; ++i, ++j) lane[j] += std::fabs(x[i]);
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

thread_local std::vector<uint8_t> tFlags;

}  // namespace

float encodeSignBlock(const float* x, size_t n, uint64_t first, uint8_t* bits) {
  if (tFlags.size() < n) tFlags.resize(n);
  uint8_t* f = tFlags.data();
  for (size_t i = 0; i < n; ++i) {
    const uint8_t evenZero = x[i] == 0.0f && (((first + i) & 1u) == 0);
    f[i] = static_cast<uint8_t>((x[i] > 0.0f) | evenZero);
  }
  writeBits(f, n, first & 7u, bits);
  return n ? static_cast<float>(absSum(x, n) / static_cast<double>(n)) : 0.0f;
}

void decodeSignBlock(const uint8_t* bits, size_t bitOffset, size_t n, float scale, float* out, bool accumulate) {
  for (size_t i = 0; i < n; ++i) {
    const size_t b = bitOffset + i;
    // + 0.0f turns -0 into +0 so an all-zero block decodes to exact +0.
    const float v = (((bits[b >> 3] >> (b & 7)) & 1u) ? scale : -scale) + 0.0f;
    out[i] = accumulate ? out[i] + v : v;
  }
}

OneBitMeans encodeOneBitBlock(const float* x, size_t n, size_t bitOffset, uint8_t* bits) {
  if (tFlags.size() < n) tFlags.resize(n);
  uint8_t* f = tFlags.data();
  double pos = 0, neg = 0;
  size_t numPos = 0;
  for (size_t i = 0; i < n; ++i) {
    f[i] = static_cast<uint8_t>(!(x[i] < 0.0f));
    numPos += f[i];
    (f[i] ? pos : neg) += x[i];
  }
  writeBits(f, n, bitOffset, bits);
  const size_t numNeg = n - numPos;
  return OneBitMeans{numPos ? static_cast<float>(pos / static_cast<double>(numPos)) : 0.0f,
                     numNeg ? static_cast<float>(neg / static_cast<double>(numNeg)) : 0.0f};
}

void decodeOneBitBlock(const uint8_t* bits, size_t bitOffset, size_t n, OneBitMeans means, float* out,
                       bool accumulate) {
  for (size_t i = 0; i < n; ++i) {
    const size_t b = bitOffset + i;
    const float v = ((bits[b >> 3] >> (b & 7)) & 1u) ? means.positive : means.negative;
    out[i] = accumulate ? out[i] + v : v;
  }
}

}  // namespace gradcomp::cpu
