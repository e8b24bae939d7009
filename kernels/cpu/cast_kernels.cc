#include "kernels/cpu/cast_kernels.h"

#include "kernels/cpu/cast_kernels_avx512.h"
#include "kernels/cpu/cpu_path.h"
#include "kernels/scalar/float_formats.h"

#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>
#define GRADCOMP_HAVE_F16C 1
#endif

namespace gradcomp::cpu {

using namespace scalar;

namespace {

#if GRADCOMP_CPU_AVX512_KERNELS
bool onAvx512() { return activeCpuPath() == CpuPath::Avx512; }
#endif
#ifdef GRADCOMP_HAVE_F16C
bool onAvx2() { return activeCpuPath() >= CpuPath::Avx2; }

uint32_t horizontalMax(__m256i v) {
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  uint32_t m = 0;
  for (uint32_t x : lanes) m = x > m ? x : m;
  return m;
}
#endif

}  // namespace

uint64_t encodeFp16(const float* in, size_t n, float prescale, uint16_t* out, bool streamOut, uint32_t* maxAbsBits) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (onAvx512()) return avx512::encodeFp16(in, n, prescale, out, streamOut, maxAbsBits);
#endif
  (void)streamOut;  // only the SIMD path streams
  uint64_t saturated = 0;
  uint32_t maxBits = 0;
  size_t i = 0;
#ifdef GRADCOMP_HAVE_F16C
  // The hardware converter rounds to nearest even like floatToHalfBits; clamping to +-65504 first
  // gives the same saturation (every |x| in (65504, 65520) rounds to 65504 anyway).
  const __m256 scale = _mm256_set1_ps(prescale), hi = _mm256_set1_ps(65504.0f), lo = _mm256_set1_ps(-65504.0f);
  const __m256 overflowAt = _mm256_set1_ps(65520.0f), absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256i maxVec = _mm256_setzero_si256();
  const bool vector = onAvx2();
  for (; vector && i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(in + i);
    maxVec = _mm256_max_epu32(maxVec, _mm256_castps_si256(_mm256_and_ps(x, absMask)));
    __m256 v = _mm256_mul_ps(x, scale);
    const __m256 over = _mm256_cmp_ps(_mm256_and_ps(v, absMask), overflowAt, _CMP_GE_OQ);
    saturated += static_cast<uint64_t>(__builtin_popcount(_mm256_movemask_ps(over)));
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    if (streamOut)
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + i), h);
    else
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  maxBits = horizontalMax(maxVec);
#endif
  for (; i < n; ++i) {
    const uint32_t a = absBits(in[i]);
    maxBits = a > maxBits ? a : maxBits;
    const float v = in[i] * prescale;
    saturated += absBits(v) >= kHalfOverflowFloatBits;  // Inf from an overflowing pre-scale counts too
    out[i] = floatToHalfBits(v);
  }
  if (maxAbsBits) *maxAbsBits = maxBits;
  return saturated;
}

void decodeFp16(const uint16_t* in, size_t n, float inversePrescale, float* out, bool accumulate, bool streamOut) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (onAvx512()) return avx512::decodeFp16(in, n, inversePrescale, out, accumulate, streamOut);
#endif
  (void)streamOut;  // only the AVX-512 path streams its decode
  size_t i = 0;
#ifdef GRADCOMP_HAVE_F16C
  const __m256 s = _mm256_set1_ps(inversePrescale);
  const bool vector = onAvx2();
  for (; vector && i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))), s);
    _mm256_storeu_ps(out + i, accumulate ? _mm256_add_ps(_mm256_loadu_ps(out + i), v) : v);
  }
#endif
  for (; i < n; ++i) {
    const float v = halfBitsToFloat(in[i]) * inversePrescale;
    out[i] = accumulate ? out[i] + v : v;
  }
}

uint64_t encodeBf16(const float* in, size_t n, uint16_t* out, bool streamOut, uint32_t* maxAbsBits) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (onAvx512()) return avx512::encodeBf16(in, n, out, streamOut, maxAbsBits);
#endif
  (void)streamOut;  // only the SIMD path streams
  uint64_t saturated = 0;
  uint32_t largest = 0;
  size_t i0 = 0;
#ifdef GRADCOMP_HAVE_F16C
  __m256i maxVec = _mm256_setzero_si256();
  // The scalar loop below on 16 lanes: RNE by integer add, saturation by blend, then a 32->16 pack.
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff), roundBias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1), overAt = _mm256_set1_epi32(0x7f7f7fff);
  const __m256i nanAt = _mm256_set1_epi32(0x7f800001), signBit = _mm256_set1_epi32(0x8000);
  const __m256i maxBits = _mm256_set1_epi32(kBf16MaxBits);
  auto lane8 = [&](const float* p, uint64_t& sat) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i ax = _mm256_and_si256(x, absMask);
    maxVec = _mm256_max_epu32(maxVec, ax);
    const __m256i hi = _mm256_srli_epi32(x, 16);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, roundBias), _mm256_and_si256(hi, one)), 16);
    const __m256i over = _mm256_cmpgt_epi32(ax, overAt);  // ax >= 0x7f7f8000 (ax < 2^31: signed is exact)
    const __m256i finite = _mm256_cmpgt_epi32(nanAt, ax);
    sat += static_cast<uint64_t>(__builtin_popcount(
        static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_and_si256(over, finite))))));
    const __m256i satValue = _mm256_or_si256(_mm256_and_si256(hi, signBit), maxBits);
    return _mm256_blendv_epi8(rounded, satValue, over);
  };
  const bool vector = onAvx2();
  for (; vector && i0 + 16 <= n; i0 += 16) {
    const __m256i a = lane8(in + i0, saturated), b = lane8(in + i0 + 8, saturated);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    if (streamOut) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + i0), _mm256_castsi256_si128(packed));
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + i0 + 8), _mm256_extracti128_si256(packed, 1));
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i0), packed);
    }
  }
  largest = horizontalMax(maxVec);
#endif
  for (size_t i = i0; i < n; ++i) {  // branch-free integer math: the compiler vectorizes it
    const uint32_t x = floatBits(in[i]);
    const uint32_t ax = x & 0x7fffffffu;
    largest = ax > largest ? ax : largest;
    const uint32_t over = ax >= 0x7f7f8000u;
    saturated += over & (ax <= 0x7f800000u);
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const uint32_t sat = ((x >> 16) & 0x8000u) | kBf16MaxBits;
    out[i] = static_cast<uint16_t>(over ? sat : rounded);
  }
  if (maxAbsBits) *maxAbsBits = largest;
  return saturated;
}

void decodeBf16(const uint16_t* in, size_t n, float* out, bool accumulate, bool streamOut) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (onAvx512()) return avx512::decodeBf16(in, n, out, accumulate, streamOut);
#endif
  (void)streamOut;
  if (accumulate) {
    for (size_t i = 0; i < n; ++i) out[i] += bf16BitsToFloat(in[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = bf16BitsToFloat(in[i]);
  }
}

template <uint16_t kExpMask>
static size_t firstAllOnesExponent(const uint16_t* in, size_t n) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (onAvx512()) return avx512::firstAllOnesExponent(in, n, kExpMask);
#endif
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

void fenceStreamedStores() {
#if defined(__x86_64__)
  __builtin_ia32_sfence();  // the AVX2 and AVX-512 paths both stream
#endif
}

size_t firstNonFiniteFp16(const uint16_t* in, size_t n) { return firstAllOnesExponent<0x7c00>(in, n); }
size_t firstNonFiniteBf16(const uint16_t* in, size_t n) { return firstAllOnesExponent<0x7f80>(in, n); }

}  // namespace gradcomp::cpu
