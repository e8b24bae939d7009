#include "kernels/cpu/level_kernels.h"

#include <cmath>

#include "kernels/cpu/block_scale_kernels.h"

namespace gradcomp::cpu {

float blockL2Norm(const float* x, size_t n) {
  double lane[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) lane[j] += static_cast<double>(x[i + j]) * x[i + j];
  for (int j = 0; i < n; ++i, ++j) lane[j] += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(std::sqrt((lane[0] + lane[1]) + (lane[2] + lane[3])));
}

float encodeQsgdBlock(const float* x, size_t n, int bits, const float* uniforms, uint8_t* codes) {
  const float norm = blockL2Norm(x, n);
  const int s = (1 << (bits - 1)) - 1;
  const float toLevel = norm > 0.0f ? static_cast<float>(s) / norm : 0.0f;
  for (size_t i = 0; i < n; ++i) {
    float level = std::floor(std::fabs(x[i]) * toLevel + uniforms[i]);
    level = level > static_cast<float>(s) ? static_cast<float>(s) : level;
    const uint32_t negative = std::signbit(x[i]) && level > 0.0f;
    codes[i] = static_cast<uint8_t>((negative << (bits - 1)) | static_cast<uint32_t>(level));
  }
  return norm;
}

void decodeQsgdBlock(const uint8_t* codes, size_t n, int bits, float norm, float* out, bool accumulate) {
  const int s = (1 << (bits - 1)) - 1;
  const float unit = norm / static_cast<float>(s);
  const uint32_t levelMask = (1u << (bits - 1)) - 1u;
  for (size_t i = 0; i < n; ++i) {
    const float mag = static_cast<float>(codes[i] & levelMask) * unit;
    const float v = (codes[i] >> (bits - 1)) ? -mag : mag;
    out[i] = accumulate ? out[i] + v : v;
  }
}

float encodeTernBlock(const float* x, size_t n, const float* uniforms, uint8_t* codes) {
  const float maxAbs = blockAmax(x, n);
  const float inv = maxAbs > 0.0f ? 1.0f / maxAbs : 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const bool keep = uniforms[i] < std::fabs(x[i]) * inv;
    codes[i] = static_cast<uint8_t>(keep ? (std::signbit(x[i]) ? 2 : 1) : 0);
  }
  return maxAbs;
}

void decodeTernBlock(const uint8_t* codes, size_t n, float maxAbs, float* out, bool accumulate) {
  for (size_t i = 0; i < n; ++i) {
    const float v = codes[i] == 1 ? maxAbs : (codes[i] == 2 ? -maxAbs : 0.0f);
    out[i] = accumulate ? out[i] + v : v;
  }
}

}  // namespace gradcomp::cpu
