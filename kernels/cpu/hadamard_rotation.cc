#include "kernels/cpu/hadamard_rotation.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace gradcomp::cpu {

using namespace scalar;

namespace {

// In-place unnormalized Walsh-Hadamard transform of one block (size a power of two): stage by stage,
// the order the CUDA twin uses too. The inner loop over j is contiguous, so it vectorizes.
void fwht(float* v, size_t size) {
  for (size_t h = 1; h < size; h <<= 1) {
    for (size_t i = 0; i < size; i += 2 * h) {
      float* a = v + i;
      float* b = v + i + h;
      for (size_t j = 0; j < h; ++j) {
        const float s = a[j] + b[j], d = a[j] - b[j];
        a[j] = s;
        b[j] = d;
      }
    }
  }
}

// Sign bits for elements [first, first + count) into flips[] (1.0f or -1.0f): one Philox word per 32
// elements, not one call per element.
void signsOf(const RngStream& s, uint64_t first, size_t count, float* flips) {
  uint64_t wordIndex = ~uint64_t{0};
  uint32_t word = 0;
  for (size_t j = 0; j < count; ++j) {
    const uint64_t i = first + j;
    if ((i >> 5) != wordIndex) {
      wordIndex = i >> 5;
      word = s.word(wordIndex);
    }
    flips[j] = ((word >> (i & 31)) & 1u) ? -1.0f : 1.0f;
  }
}

// v x scale, saturated to +-FLT_MAX when a finite v overflows: a value reconstructed a rounding error above
// FLT_MAX (an input at the edge of the range) stays finite, as the other codecs saturate. NaN stays NaN.
inline float saturatingScale(float v, float scale) {
  const float r = v * scale;
  if (std::isinf(r) && std::isfinite(v)) return std::copysign(FLT_MAX, v);
  return r;
}

template <typename Fn>
void forRotationBlocks(size_t n, size_t blockSize, Fn&& fn) {
  size_t start = 0;
  for (; start + blockSize <= n; start += blockSize) fn(start, blockSize);
  for (size_t size = blockSize >> 1; size > 0; size >>= 1)
    if (start + size <= n) {
      fn(start, size);
      start += size;
    }
}

}  // namespace

void rotateForward(const float* x, float* y, size_t n, size_t blockSize, const RotationKey& key, float prescale) {
  const RngStream s = rotationStream(key);
  float flips[8192];
  forRotationBlocks(n, blockSize, [&](size_t start, size_t size) {
    signsOf(s, start, size, flips);
    for (size_t j = 0; j < size; ++j) y[start + j] = (x[start + j] * prescale) * flips[j];
    fwht(y + start, size);
    const float norm = rotationNorm(size);
    for (size_t j = 0; j < size; ++j) y[start + j] *= norm;
  });
}

void rotateInverse(const float* y, float* x, size_t n, size_t blockSize, const RotationKey& key, float postscale) {
  const RngStream s = rotationStream(key);
  float flips[8192];
  forRotationBlocks(n, blockSize, [&](size_t start, size_t size) {
    if (x != y) std::copy(y + start, y + start + size, x + start);
    fwht(x + start, size);
    signsOf(s, start, size, flips);
    const float norm = rotationNorm(size);
    for (size_t j = 0; j < size; ++j) x[start + j] = saturatingScale((x[start + j] * norm) * flips[j], postscale);
  });
}

}  // namespace gradcomp::cpu
