#include "kernels/cpu/hadamard_rotation.h"

#if defined(__AVX2__)
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
// GCC 12's AVX-512 intrinsics pass an "undefined" vector that its own -Wmaybe-uninitialized flags inside
// avx512fintrin.h once inlined (GCC bug 105593); see kernels/cpu/block_scale_kernels.cc.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace gradcomp::cpu {

using namespace scalar;

namespace {

// In-place unnormalized Walsh-Hadamard transform of one block (size a power of two): stage by stage,
// the order the CUDA twin uses too. The stages of span 1, 2 and 4 run on 8-element chunks (their inner
// loops would be 1-4 long), in registers where the build has AVX2 / AVX-512; from there on the inner
// loop over j is contiguous and vectorizes. Every
// output is the same a + b or a - b of the same two values as in the plain loop, so the bits do not change.
void fwht(float* v, size_t size) {
  size_t h = 1;
#if defined(__AVX512F__)
  // The stages of span 1, 2, 4, 8 inside one 16-lane register: lane i's partner is lane i ^ h (a permute);
  // the lower lane of each pair takes a + b, the upper a - b, the same two values as the scalar loop.
  if (size >= 16) {
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (size_t i = 0; i < size; i += 16) {
      __m512 x = _mm512_loadu_ps(v + i);
      for (int span = 1; span < 16; span <<= 1) {
        const __m512 t = _mm512_permutexvar_ps(_mm512_xor_si512(lanes, _mm512_set1_epi32(span)), x);
        const __mmask16 upper = _mm512_test_epi32_mask(lanes, _mm512_set1_epi32(span));
        x = _mm512_mask_blend_ps(upper, _mm512_add_ps(x, t), _mm512_sub_ps(t, x));
      }
      _mm512_storeu_ps(v + i, x);
    }
    h = 16;
  }
#elif defined(__AVX2__)
  if (size >= 8) {
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (size_t i = 0; i < size; i += 8) {
      __m256 x = _mm256_loadu_ps(v + i);
      for (int span = 1; span < 8; span <<= 1) {
        const __m256 t = _mm256_permutevar8x32_ps(x, _mm256_xor_si256(lanes, _mm256_set1_epi32(span)));
        const __m256 upper = _mm256_castsi256_ps(
            _mm256_cmpeq_epi32(_mm256_and_si256(lanes, _mm256_set1_epi32(span)), _mm256_set1_epi32(span)));
        x = _mm256_blendv_ps(_mm256_add_ps(x, t), _mm256_sub_ps(t, x), upper);
      }
      _mm256_storeu_ps(v + i, x);
    }
    h = 8;
  }
#endif
  if (h == 1 && size >= 8) {
    for (size_t i = 0; i < size; i += 8) {
      float* c = v + i;
      for (size_t span = 1; span < 8; span <<= 1)
        for (size_t k = 0; k < 8; k += 2 * span)
          for (size_t j = 0; j < span; ++j) {
            const float a = c[k + j], b = c[k + j + span];
            c[k + j] = a + b;
            c[k + j + span] = a - b;
          }
    }
    h = 8;
  }
  for (; h < size; h <<= 1) {
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

// D's entries for elements [first, first + count) as sign-bit masks (bit 31 set: -1): one Philox call per
// 128 elements, and a branch-free inner loop over them. Flipping the sign bit is exactly the product with
// -1.0f for every non-NaN value, the CUDA twin's and the definition's.
void signMasks(const RngStream& s, uint64_t first, size_t count, uint32_t* masks) {
  size_t j = 0;
  while (j < count) {
    const uint64_t blockIndex = (first + j) >> 7;
    const Philox4 w = s.block(blockIndex);
    const uint32_t words[4] = {w.v[0], w.v[1], w.v[2], w.v[3]};
    const size_t end = std::min<uint64_t>(count, ((blockIndex + 1) << 7) - first);
    for (; j < end; ++j) {
      const uint32_t e = static_cast<uint32_t>((first + j) & 127u);
      masks[j] = ((words[e >> 5] >> (e & 31u)) & 1u) << 31;
    }
  }
}

inline float flipped(float v, uint32_t mask) { return bitsToFloat(floatBits(v) ^ mask); }

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
  uint32_t masks[8192];
  forRotationBlocks(n, blockSize, [&](size_t start, size_t size) {
    signMasks(s, start, size, masks);
    for (size_t j = 0; j < size; ++j) y[start + j] = flipped(x[start + j] * prescale, masks[j]);
    fwht(y + start, size);
    const float norm = rotationNorm(size);
    for (size_t j = 0; j < size; ++j) y[start + j] *= norm;
  });
}

void rotateInverse(const float* y, float* x, size_t n, size_t blockSize, const RotationKey& key, float postscale) {
  const RngStream s = rotationStream(key);
  uint32_t masks[8192];
  forRotationBlocks(n, blockSize, [&](size_t start, size_t size) {
    if (x != y) std::copy(y + start, y + start + size, x + start);
    fwht(x + start, size);
    signMasks(s, start, size, masks);
    const float norm = rotationNorm(size);
    for (size_t j = 0; j < size; ++j) x[start + j] = saturatingScale(flipped(x[start + j] * norm, masks[j]), postscale);
  });
}

}  // namespace gradcomp::cpu
