#include "kernels/cpu/block_scale_kernels.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace gradcomp::cpu {

using namespace scalar;

float blockScale(float amax, float maxCode) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 1.0f;
  const float s = maxCode / amax;  // IEEE division: correctly rounded, same on CUDA (__fdiv_rn)
  return std::isinf(s) ? FLT_MAX : s;
}

float blockAmax(const float* x, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, absBits(x[i]));
  return bitsToFloat(m);
}

// Branch-free floatToFp8 for finite input so the loop vectorizes; tested equal to the scalar one.
static inline uint8_t fp8Lane(float v, const Fp8Spec& s, uint32_t maxBits) {
  const uint32_t xb = floatBits(v);
  const uint32_t sign = (xb >> 24) & 0x80u;
  const uint32_t a = xb & 0x7fffffffu;
  const uint32_t sub = floatBits(bitsToFloat(a) + s.subnormalMagic) - floatBits(s.subnormalMagic);
  const int shift = 23 - s.mantBits;
  const uint32_t odd = (a >> shift) & 1u;
  const uint32_t nor = (a + (static_cast<uint32_t>(s.bias - 127) << 23) + ((1u << (shift - 1)) - 1u) + odd) >> shift;
  uint32_t code = a < s.minNormalBits ? sub : nor;
  code = a >= maxBits ? s.maxCode : code;
  code = code > s.maxCode ? s.maxCode : code;
  return static_cast<uint8_t>(sign | code);
}

float encodeFp8Block(const float* x, size_t n, Fp8Format fmt, uint8_t* codes, uint64_t& saturated) {
  const Fp8Spec s = fp8Spec(fmt);
  const float scale = blockScale(blockAmax(x, n), s.maxValue);
  const uint32_t maxBits = floatBits(s.maxValue);
  // A saturation is a value that would have rounded past the largest code: at or beyond the midpoint
  // between max and the next power of the format (448 + 16 for E4M3, 57344 + 4096 for E5M2).
  const uint32_t overflowBits = maxBits + (1u << (22 - s.mantBits));
  uint64_t sat = 0;
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i] * scale;
    sat += absBits(v) >= overflowBits;  // only possible when the scale was capped or neutral
    codes[i] = fp8Lane(v, s, maxBits);
  }
  saturated += sat;
  return scale;
}

void decodeFp8Block(const uint8_t* codes, size_t n, Fp8Format fmt, float scale, float* out, bool accumulate) {
  const Fp8Spec s = fp8Spec(fmt);
  const float inv = 1.0f / scale;
  const int m = s.mantBits;
  const float step = bitsToFloat(static_cast<uint32_t>(127 + 1 - s.bias - m) << 23);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t c = codes[i];
    const uint32_t sign = (c & 0x80u) << 24;
    const uint32_t e = (c & 0x7fu) >> m;
    const uint32_t mant = c & ((1u << m) - 1u);
    const uint32_t normal = sign | ((e + 127u - static_cast<uint32_t>(s.bias)) << 23) | (mant << (23 - m));
    const uint32_t sub = sign | floatBits(static_cast<float>(mant) * step);
    const float v = bitsToFloat(e == 0 ? sub : normal) * inv;
    out[i] = accumulate ? out[i] + v : v;
  }
}

size_t firstNonFiniteFp8(const uint8_t* codes, size_t n, Fp8Format fmt) {
  for (size_t i = 0; i < n; ++i)
    if (!fp8IsFinite(codes[i], fmt)) return i;
  return n;
}

float encodeInt8Block(const float* x, size_t n, const float* uniforms, int8_t* codes) {
  const float scale = blockScale(blockAmax(x, n), 127.0f);
  if (uniforms) {
    for (size_t i = 0; i < n; ++i) {
      const float q = std::floor(x[i] * scale + uniforms[i]);
      codes[i] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const float q = std::nearbyint(x[i] * scale);
      codes[i] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
  return scale;
}

void decodeInt8Block(const int8_t* codes, size_t n, float scale, float* out, bool accumulate) {
  const float inv = 1.0f / scale;
  for (size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(codes[i]) * inv;
    out[i] = accumulate ? out[i] + v : v;
  }
}

void fillUniforms(const RngStream& stream, uint64_t first, size_t n, float* u) {
  size_t i = 0;
  while (i < n && ((first + i) & 3u)) {
    u[i] = uniform01(stream.word(first + i));
    ++i;
  }
  for (; i + 4 <= n; i += 4) {
    const Philox4 r = stream.block((first + i) >> 2);
    for (int j = 0; j < 4; ++j) u[i + j] = uniform01(r.v[j]);
  }
  for (; i < n; ++i) u[i] = uniform01(stream.word(first + i));
}

}  // namespace gradcomp::cpu
