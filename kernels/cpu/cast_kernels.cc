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

uint64_t horizontalSum(__m256i v) {
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  uint64_t sum = 0;
  for (uint32_t x : lanes) sum += x;
  return sum;
}

// One thread's stream of reads here outruns this CPU's hardware prefetcher (a Zen 3 EPYC: fp16 encode
// 0.66 -> 0.53x memcpy with it, docs/notes.md): ask for the line 2 KiB ahead. A prefetch never faults, so
// the last steps may point past the array.
inline void prefetchAhead(const void* p) { _mm_prefetch(static_cast<const char*>(p) + 2048, _MM_HINT_T0); }

// The per-lane saturation counts of the encoders are added up every this many elements: a lane counts
// at most one in 8 of them, far below 2^32.
constexpr size_t kLaneCountSpan = size_t{1} << 30;
#endif

}  // namespace

#ifdef GRADCOMP_HAVE_F16C
namespace {

// 8 lanes of encodeFp16: the codes, with the input's largest |bits| and the per-lane saturation counts
// kept in registers. The hardware converter rounds to nearest even like floatToHalfBits; clamping to
// +-65504 first gives the same saturation (every |x| in (65504, 65520) rounds to 65504 anyway). Without
// a pre-scale (kScaled false, the default codec) |v| is |x|: no multiply, one absolute value.
template <bool kScaled>
inline __m128i fp16Lanes(__m256 x, __m256 scale, __m256i& maxVec, __m256i& satLanes) {
  const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 ax = _mm256_and_ps(x, absMask);
  maxVec = _mm256_max_epu32(maxVec, _mm256_castps_si256(ax));
  const __m256 v = kScaled ? _mm256_mul_ps(x, scale) : x;
  const __m256 av = kScaled ? _mm256_and_ps(v, absMask) : ax;
  // A compare is -1 where true: one subtraction counts instead of movemask + popcnt + add (the loop is
  // bound by its uops when the data is in cache or two threads share a core).
  satLanes = _mm256_sub_epi32(satLanes, _mm256_castps_si256(_mm256_cmp_ps(av, _mm256_set1_ps(65520.0f), _CMP_GE_OQ)));
  const __m256 clamped = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-65504.0f)), _mm256_set1_ps(65504.0f));
  return _mm256_cvtps_ph(clamped, _MM_FROUND_TO_NEAREST_INT);
}

// The vector part of encodeFp16, 16 values a step (one prefetch per cache line); returns where it
// stopped. The lane counts are added up every kLaneCountSpan elements, long before one could wrap.
template <bool kScaled, bool kStream>
size_t encodeFp16Vector(const float* in, size_t n, float prescale, uint16_t* out, uint64_t& saturated,
                        uint32_t& maxBits) {
  const __m256 scale = _mm256_set1_ps(prescale);
  __m256i maxVec = _mm256_setzero_si256();
  const auto store = [out](size_t i, __m128i h) {
    if (kStream)
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + i), h);
    else
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  };
  size_t i = 0;
  while (i + 8 <= n) {
    __m256i satLanes = _mm256_setzero_si256();
    const size_t end = n - i > kLaneCountSpan ? i + kLaneCountSpan : n;
    for (; i + 16 <= end; i += 16) {
      prefetchAhead(in + i);
      store(i, fp16Lanes<kScaled>(_mm256_loadu_ps(in + i), scale, maxVec, satLanes));
      store(i + 8, fp16Lanes<kScaled>(_mm256_loadu_ps(in + i + 8), scale, maxVec, satLanes));
    }
    if (i + 8 <= end) {
      store(i, fp16Lanes<kScaled>(_mm256_loadu_ps(in + i), scale, maxVec, satLanes));
      i += 8;
    }
    saturated += horizontalSum(satLanes);
  }
  maxBits = horizontalMax(maxVec);
  return i;
}

}  // namespace
#endif

uint64_t encodeFp16(const float* in, size_t n, float prescale, uint16_t* out, bool streamOut, uint32_t* maxAbsBits) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (onAvx512()) return avx512::encodeFp16(in, n, prescale, out, streamOut, maxAbsBits);
#endif
  uint64_t saturated = 0;
  uint32_t maxBits = 0;
  size_t i = 0;
#ifdef GRADCOMP_HAVE_F16C
  if (onAvx2()) {
    const bool scaled = prescale != 1.0f;
    i = scaled ? (streamOut ? encodeFp16Vector<true, true>(in, n, prescale, out, saturated, maxBits)
                            : encodeFp16Vector<true, false>(in, n, prescale, out, saturated, maxBits))
               : (streamOut ? encodeFp16Vector<false, true>(in, n, prescale, out, saturated, maxBits)
                            : encodeFp16Vector<false, false>(in, n, prescale, out, saturated, maxBits));
  }
#else
  (void)streamOut;  // only the vector paths stream
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
  auto lane8 = [&](const float* p, __m256i& sat) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i ax = _mm256_and_si256(x, absMask);
    maxVec = _mm256_max_epu32(maxVec, ax);
    const __m256i hi = _mm256_srli_epi32(x, 16);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, roundBias), _mm256_and_si256(hi, one)), 16);
    const __m256i over = _mm256_cmpgt_epi32(ax, overAt);  // ax >= 0x7f7f8000 (ax < 2^31: signed is exact)
    const __m256i finite = _mm256_cmpgt_epi32(nanAt, ax);
    sat = _mm256_sub_epi32(sat, _mm256_and_si256(over, finite));  // -1 where saturated
    const __m256i satValue = _mm256_or_si256(_mm256_and_si256(hi, signBit), maxBits);
    return _mm256_blendv_epi8(rounded, satValue, over);
  };
  const bool vector = onAvx2();
  while (vector && i0 + 16 <= n) {
    __m256i satLanes = _mm256_setzero_si256();  // per-lane counts, as in encodeFp16
    const size_t end = n - i0 > kLaneCountSpan ? i0 + kLaneCountSpan : n;
    for (; i0 + 16 <= end; i0 += 16) {
      prefetchAhead(in + i0);
      const __m256i a = lane8(in + i0, satLanes), b = lane8(in + i0 + 8, satLanes);
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
      if (streamOut) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(out + i0), _mm256_castsi256_si128(packed));
        _mm_stream_si128(reinterpret_cast<__m128i*>(out + i0 + 8), _mm256_extracti128_si256(packed, 1));
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i0), packed);
      }
    }
    saturated += horizontalSum(satLanes);
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

namespace {

// No payload check (the accumulate decode and the error-feedback scratch decode: checked before).
struct NoCheck {
#ifdef GRADCOMP_HAVE_F16C
  void operator()(__m128i) {}
#endif
  void operator()(uint16_t) {}
  bool any() const { return false; }
};

// Whether any code has an all-ones exponent (Inf/NaN), kept while the decode reads the codes: one OR a
// step instead of a second pass over them (the separate check was a third of a 64K-value decode).
struct ExponentCheck {
  explicit ExponentCheck(uint16_t expMask) : scalarMask(expMask) {}
#ifdef GRADCOMP_HAVE_F16C
  void operator()(__m128i h) {
    const __m128i mask = _mm_set1_epi16(static_cast<short>(scalarMask));
    hits = _mm_or_si128(hits, _mm_cmpeq_epi16(_mm_and_si128(h, mask), mask));
  }
  bool any() const { return scalarHits || !_mm_testz_si128(hits, hits); }
  __m128i hits = _mm_setzero_si128();
#else
  bool any() const { return scalarHits; }
#endif
  void operator()(uint16_t c) { scalarHits |= (c & scalarMask) == scalarMask; }
  uint16_t scalarMask;
  bool scalarHits = false;
};

}  // namespace

#ifdef GRADCOMP_HAVE_F16C
namespace {

// out[i] (=|+=) widen(8 codes at in + i), 8 lanes a step, every code also seen by check; the scalar loop
// after it takes what is left. Overwrite with streamOut: non-temporal stores after a scalar head that
// reaches a 32-byte boundary (the output is far larger than the caches: a normal store first reads
// each line it overwrites, 64 bytes read for 64 written; the codec fences once per thread). Returns the
// index where the vector loop stopped.
template <typename Widen, typename Scalar, typename Check>
size_t decode8(const uint16_t* in, size_t n, float* out, bool accumulate, bool streamOut, Widen widen, Scalar one,
               Check& check) {
  const auto codes = [in, &check](size_t i) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    check(h);
    return h;
  };
  size_t i = 0;
  if (accumulate) {
    for (; i + 8 <= n; i += 8) {
      prefetchAhead(in + i);
      prefetchAhead(out + i);
      _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), widen(codes(i))));
    }
  } else if (streamOut) {
    for (; i < n && reinterpret_cast<uintptr_t>(out + i) % 32 != 0; ++i) {
      check(in[i]);
      out[i] = one(in[i]);
    }
    for (; i + 8 <= n; i += 8) {
      prefetchAhead(in + i);
      _mm256_stream_ps(out + i, widen(codes(i)));
    }
  } else {
    for (; i + 8 <= n; i += 8) {
      prefetchAhead(in + i);
      _mm256_storeu_ps(out + i, widen(codes(i)));
    }
  }
  return i;
}

struct WidenFp16 {
  __m256 scale;
  __m256 operator()(__m128i h) const { return _mm256_mul_ps(_mm256_cvtph_ps(h), scale); }
};

struct WidenBf16 {
  __m256 operator()(__m128i h) const { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
};

}  // namespace
#endif

namespace {

// The decodes below without the AVX-512 path: vector steps where the CPU has AVX2 + F16C, then the
// scalar rest. Returns whether check saw an Inf/NaN code.
template <typename Check>
bool decodeFp16Portable(const uint16_t* in, size_t n, float inversePrescale, float* out, bool accumulate,
                        bool streamOut, Check& check) {
  const auto one = [inversePrescale](uint16_t h) { return halfBitsToFloat(h) * inversePrescale; };
  size_t i = 0;
#ifdef GRADCOMP_HAVE_F16C
  if (onAvx2()) i = decode8(in, n, out, accumulate, streamOut, WidenFp16{_mm256_set1_ps(inversePrescale)}, one, check);
#else
  (void)streamOut;  // only the vector paths stream
#endif
  for (; i < n; ++i) {
    check(in[i]);
    out[i] = accumulate ? out[i] + one(in[i]) : one(in[i]);
  }
  return check.any();
}

template <typename Check>
bool decodeBf16Portable(const uint16_t* in, size_t n, float* out, bool accumulate, bool streamOut, Check& check) {
  size_t i = 0;
#ifdef GRADCOMP_HAVE_F16C
  if (onAvx2()) i = decode8(in, n, out, accumulate, streamOut, WidenBf16{}, bf16BitsToFloat, check);
#else
  (void)streamOut;  // only the vector paths stream
#endif
  for (; i < n; ++i) {
    check(in[i]);
    out[i] = accumulate ? out[i] + bf16BitsToFloat(in[i]) : bf16BitsToFloat(in[i]);
  }
  return check.any();
}

}  // namespace

void decodeFp16(const uint16_t* in, size_t n, float inversePrescale, float* out, bool accumulate, bool streamOut) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (onAvx512()) return avx512::decodeFp16(in, n, inversePrescale, out, accumulate, streamOut);
#endif
  NoCheck none;
  decodeFp16Portable(in, n, inversePrescale, out, accumulate, streamOut, none);
}

void decodeBf16(const uint16_t* in, size_t n, float* out, bool accumulate, bool streamOut) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (onAvx512()) return avx512::decodeBf16(in, n, out, accumulate, streamOut);
#endif
  NoCheck none;
  decodeBf16Portable(in, n, out, accumulate, streamOut, none);
}

uint64_t encodeFp16WithResidual(const float* in, size_t n, float prescale, float inversePrescale, uint16_t* out,
                                float* residual) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (onAvx512()) return avx512::encodeFp16WithResidual(in, n, prescale, inversePrescale, out, residual);
#endif
  const uint64_t saturated = encodeFp16(in, n, prescale, out);
  decodeFp16(out, n, inversePrescale, residual, false);
  for (size_t i = 0; i < n; ++i) residual[i] = in[i] - residual[i];
  return saturated;
}

uint64_t encodeBf16WithResidual(const float* in, size_t n, uint16_t* out, float* residual) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (onAvx512()) return avx512::encodeBf16WithResidual(in, n, out, residual);
#endif
  const uint64_t saturated = encodeBf16(in, n, out);
  decodeBf16(out, n, residual, false);
  for (size_t i = 0; i < n; ++i) residual[i] = in[i] - residual[i];
  return saturated;
}

size_t decodeFp16Checked(const uint16_t* in, size_t n, float inversePrescale, float* out, bool streamOut) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (onAvx512()) {  // the check first, then the decode (the AVX-512 loops keep no check)
    const size_t bad = firstNonFiniteFp16(in, n);
    if (bad == n) avx512::decodeFp16(in, n, inversePrescale, out, false, streamOut);
    return bad;
  }
#endif
  ExponentCheck check(0x7c00);
  return decodeFp16Portable(in, n, inversePrescale, out, false, streamOut, check) ? firstNonFiniteFp16(in, n) : n;
}

size_t decodeBf16Checked(const uint16_t* in, size_t n, float* out, bool streamOut) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (onAvx512()) {
    const size_t bad = firstNonFiniteBf16(in, n);
    if (bad == n) avx512::decodeBf16(in, n, out, false, streamOut);
    return bad;
  }
#endif
  ExponentCheck check(0x7f80);
  return decodeBf16Portable(in, n, out, false, streamOut, check) ? firstNonFiniteBf16(in, n) : n;
}

template <uint16_t kExpMask>
static size_t firstAllOnesExponent(const uint16_t* in, size_t n) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (onAvx512()) return avx512::firstAllOnesExponent(in, n, kExpMask);
#endif
  constexpr size_t kChunk = 512;
  for (size_t base = 0; base < n; base += kChunk) {
    const size_t end = base + kChunk < n ? base + kChunk : n;
#ifdef GRADCOMP_HAVE_F16C
    // This is the decode's first read of the codes (prefetchAhead's reason): the lines of the chunk
    // after next, ahead of the vectorized scan below (a prefetch inside it would stop the vectorizer).
    for (size_t line = 0; line < kChunk * sizeof(uint16_t); line += 64) prefetchAhead(reinterpret_cast<const char*>(in + base) + line);
#endif
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
