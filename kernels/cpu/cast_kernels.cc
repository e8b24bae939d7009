#include "kernels/cpu/cast_kernels.h"

#include "kernels/scalar/float_formats.h"

#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>
#define GRADCOMP_HAVE_F16C 1
#endif

namespace gradcomp::cpu {

using namespace scalar;

uint64_t encodeFp16(const float* in, size_t n, float prescale, uint16_t* out) {
  uint64_t saturated = 0;
  size_t i = 0;
#ifdef GRADCOMP_HAVE_F16C
  // The hardware converter rounds to nearest even like floatToHalfBits; clamping to +-65504 first
  // gives the same saturation (every |x| in (65504, 65520) rounds to 65504 anyway).
  const __m256 scale = _mm256_set1_ps(prescale), hi = _mm256_set1_ps(65504.0f), lo = _mm256_set1_ps(-65504.0f);
  const __m256 overflowAt = _mm256_set1_ps(65520.0f), absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(in + i), scale);
    const __m256 over = _mm256_cmp_ps(_mm256_and_ps(v, absMask), overflowAt, _CMP_GE_OQ);
    saturated += static_cast<uint64_t>(__builtin_popcount(_mm256_movemask_ps(over)));
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < n; ++i) {
    const float v = in[i] * prescale;
    saturated += absBits(v) >= kHalfOverflowFloatBits;  // Inf from an overflowing pre-scale counts too
    out[i] = floatToHalfBits(v);
  }
  return saturated;
}

void decodeFp16(const uint16_t* in, size_t n, float inversePrescale, float* out, bool accumulate) {
  size_t i = 0;
#ifdef GRADCOMP_HAVE_F16C
  const __m256 s = _mm256_set1_ps(inversePrescale);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))), s);
    _mm256_storeu_ps(out + i, accumulate ? _mm256_add_ps(_mm256_loadu_ps(out + i), v) : v);
  }
#endif
  for (; i < n; ++i) {
    const float v = halfBitsToFloat(in[i]) * inversePrescale;
    out[i] = accumulate ? out[i] + v : v;
  }
}

uint64_t encodeBf16(const float* in, size_t n, uint16_t* out) {
  uint64_t saturated = 0;
  for (size_t i = 0; i < n; ++i) {  // branch-free integer math: the compiler vectorizes it
    const uint32_t x = floatBits(in[i]);
    const uint32_t ax = x & 0x7fffffffu;
    const uint32_t over = ax >= 0x7f7f8000u;
    saturated += over & (ax <= 0x7f800000u);
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const uint32_t sat = ((x >> 16) & 0x8000u) | kBf16MaxBits;
    out[i] = static_cast<uint16_t>(over ? sat : rounded);
  }
  return saturated;
}

void decodeBf16(const uint16_t* in, size_t n, float* out, bool accumulate) {
  if (accumulate) {
    for (size_t i = 0; i < n; ++i) out[i] += bf16BitsToFloat(in[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = bf16BitsToFloat(in[i]);
  }
}

template <uint16_t kExpMask>
static size_t firstAllOnesExponent(const uint16_t* in, size_t n) {
  constexpr size_t kChunk = 512;
  for (size_t base = 0; base < n; base += kChunk) {
    const size_t end = base + kChunk < n ? base + kChunk : n;
    uint32_t any = 0;
    for (size_t i = base; i < end; ++i) any |= (in[i] & kExpMask) == kExpMask;
    if (any)
      for (size_t i = base; i < end; ++i)
        if ((in[i] & kExpMask) == kExpMask) return i;
  }
  return n;
}

size_t firstNonFiniteFp16(const uint16_t* in, size_t n) { return firstAllOnesExponent<0x7c00>(in, n); }
size_t firstNonFiniteBf16(const uint16_t* in, size_t n) { return firstAllOnesExponent<0x7f80>(in, n); }

}  // namespace gradcomp::cpu
