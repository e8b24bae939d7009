// Steps the AVX2 block encoders share (block_scale_kernels.cc's int8 and int4, microscaling_kernels_avx2.cc's
// MX / NVFP4, level_kernels.cc's qsgd and terngrad): a block's largest magnitude, the largest magnitudes of 8
// blocks at once, the packing of 4-bit and 2-bit codes held one per 32-bit lane, and stochastic
// rounding's uniforms widened from their Philox fields.
#pragma once

#if defined(__AVX2__)
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gradcomp::cpu {

// The stochastic-rounding uniforms (k + 1/2) 2^-kBits of the 8 kBits-bit fields k at p (8 or 16 bits,
// little-endian: rounding_fields.h). k 2^-b + 2^-(b+1) is exact in fp32 (k < 2^16), so the fused and the
// two rounded operations give the same float.
template <int kBits>
inline __m256 uniformsOfFields8(const uint8_t* p) {
  static_assert(kBits == 8 || kBits == 16, "rounding fields are 8 or 16 bits");
  const __m256 unit = _mm256_set1_ps(1.0f / static_cast<float>(1u << kBits));
  const __m256 halfUnit = _mm256_set1_ps(0.5f / static_cast<float>(1u << kBits));
  __m256i k;
  if constexpr (kBits == 16)
    k = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  else
    k = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
#if defined(__FMA__)
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(k), unit, halfUnit);
#else
  return _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(k), unit), halfUnit);
#endif
}

// The largest of 8 unsigned 32-bit lanes.
inline uint32_t largestLane(__m256i v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(m));
}

// max |x[i]| as fp32 bits over len values, len a multiple of 8.
inline uint32_t blockMaxAbsBitsAvx2(const float* x, size_t len) {
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff);
  __m256i acc = _mm256_setzero_si256();
  for (size_t i = 0; i < len; i += 8) {
    // This first read of the block is an encoder's stream from memory, which one thread's reads outrun
    // the hardware prefetcher on (as in cast_kernels.cc): the line 2 KiB ahead is asked for. A prefetch
    // never faults, so the lines past the input's end cost nothing.
    if (i % 16 == 0) _mm_prefetch(reinterpret_cast<const char*>(x + i) + 2048, _MM_HINT_T0);
    acc = _mm256_max_epu32(acc, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), absMask));
  }
  return largestLane(acc);
}

// Lane by lane, the largest |x| bits over len values (len a multiple of 8): lane l holds the maximum of
// x[l], x[8 + l], ... A block's maximum before the group encoders' transposing reduction (laneMaxima8).
inline __m256i laneMaxAbsBits(const float* x, size_t len) {
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff);
  __m256i acc = _mm256_setzero_si256();
  for (size_t i = 0; i < len; i += 8)
    acc = _mm256_max_epu32(acc, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), absMask));
  return acc;
}

// The largest lane of each of 8 vectors, lane j of the result from m[j]: a transposing reduction (7
// maxima and 14 shuffles for 8 blocks, where a horizontal maximum per block takes 6 steps).
inline __m256i laneMaxima8(const __m256i* m) {
  __m256i p[4], q[2];
  // 128-bit lane 0 of p[k]: 4 partial maxima of m[2k]; lane 1: of m[2k + 1].
  for (int k = 0; k < 4; ++k)
    p[k] = _mm256_max_epu32(_mm256_permute2x128_si256(m[2 * k], m[2 * k + 1], 0x20),
                            _mm256_permute2x128_si256(m[2 * k], m[2 * k + 1], 0x31));
  // Lane L of q[r]: 2 partial maxima of m[4r + L], then 2 of m[4r + 2 + L].
  for (int r = 0; r < 2; ++r)
    q[r] = _mm256_max_epu32(_mm256_unpacklo_epi64(p[2 * r], p[2 * r + 1]), _mm256_unpackhi_epi64(p[2 * r], p[2 * r + 1]));
  // Lane L, dword k: the maximum of m[2k + L]; the permutation puts it at position 2k + L.
  const __m256 a = _mm256_castsi256_ps(q[0]), b = _mm256_castsi256_ps(q[1]);
  const __m256i e = _mm256_max_epu32(_mm256_castps_si256(_mm256_shuffle_ps(a, b, 0x88)),
                                     _mm256_castps_si256(_mm256_shuffle_ps(a, b, 0xdd)));
  return _mm256_permutevar8x32_epi32(e, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// 8 codes of 4 bits (one per 32-bit lane, each at most 0xf) packed LSB-first: the odd element's code
// (bits 32..35 of each 64-bit lane) moved beside the even one's (bits 4..7), then the low dword of each
// 64-bit lane gathered into the low 128 bits, in order (each at most 0xff).
inline __m128i nibblePairs(__m256i codes) {
  const __m256i pairs = _mm256_or_si256(codes, _mm256_srli_epi64(codes, 28));
  return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(pairs, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
}

// 16 codes of 4 bits (lo: the first 8, hi: the next 8) to 8 bytes at out, by two unsigned narrowings that
// never saturate.
inline void storeNibbles16(__m256i lo, __m256i hi, uint8_t* out) {
  const __m128i w = _mm_packus_epi32(nibblePairs(lo), nibblePairs(hi));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(w, w));
}

// Two vectors of 32 bytes, each a 4-bit code (b0: codes 0-3 of c[0..3] in lane 0, 4-7 in lane 1; b1 the
// same of c[4..7], as the packs of storeNibbles64 leave them), to 32 bytes at out: neighbours joined into
// one byte by a multiply-add (lo + 16 hi), a last pack (lane 0: the 4-code words of codes 0-3 of each
// c[v], lane 1: of codes 4-7), and the two lanes' words interleaved into element order.
inline void storeNibbleBytes64(__m256i b0, __m256i b1, uint8_t* out) {
  const __m256i joins = _mm256_set1_epi16(0x1001);  // bytes 1, 16: lo x 1 + hi x 16
  const __m256i w = _mm256_packus_epi16(_mm256_maddubs_epi16(b0, joins), _mm256_maddubs_epi16(b1, joins));
  const __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi16(lo, hi));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm_unpackhi_epi16(lo, hi));
}

// 32 int32 codes (8 in each of a..d) narrowed to bytes with signed saturation: two in-lane packs of pairs
// and one more, which leave the bytes in lane order (codes 0-3 of a, b, c, d, then 4-7 of each).
inline __m256i packedCodeBytes32(__m256i a, __m256i b, __m256i c, __m256i d) {
  return _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
}

// packedCodeBytes32's bytes stored in element order: a dword permute.
inline void storeCodeBytes32(__m256i bytes, int8_t* out) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permutevar8x32_epi32(bytes, order));
}

// int8's codes of 32 rounded values (8 in each of a..d, any int32) clamped to [-127, 127] and stored in
// element order: the packs saturate to [-128, 127] and one byte maximum lifts -128, where a clamp per
// 8-lane vector takes two (int8 stochastic encode, docs/notes.md twenty-fifth part).
inline void storeInt8CodeBytes32(__m256i a, __m256i b, __m256i c, __m256i d, int8_t* out) {
  storeCodeBytes32(_mm256_max_epi8(packedCodeBytes32(a, b, c, d), _mm256_set1_epi8(-127)), out);
}

// 64 codes of 4 bits (c[v] holds codes 8v .. 8v + 7, one per 32-bit lane, each at most 0xf) to 32 bytes
// at out, in 14 instructions where four storeNibbles16 take 36: the codes narrowed to bytes by three packs
// (in-lane: lane 0 of the bytes holds codes 0-3 of c[0..3], lane 1 codes 4-7), then storeNibbleBytes64.
inline void storeNibbles64(const __m256i* c, uint8_t* out) {
  storeNibbleBytes64(_mm256_packus_epi16(_mm256_packus_epi32(c[0], c[1]), _mm256_packus_epi32(c[2], c[3])),
                     _mm256_packus_epi16(_mm256_packus_epi32(c[4], c[5]), _mm256_packus_epi32(c[6], c[7])), out);
}

// 64 signed integer codes (c[v] holds codes 8v .. 8v + 7, one per 32-bit lane, each within [-128, 127])
// clamped to [-top, top] and stored as 4-bit two's complement, as storeNibbles64: the clamp and the mask
// on the packed bytes, 2 vectors of 32, where a clamp per 8-lane vector takes 8 (int4 encode).
inline void storeClampedNibbles64(const __m256i* c, int8_t top, uint8_t* out) {
  const __m256i hi = _mm256_set1_epi8(top), lo = _mm256_set1_epi8(static_cast<int8_t>(-top)), low4 = _mm256_set1_epi8(0x0f);
  const auto nibbles = [&](const __m256i* v) {
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    return _mm256_and_si256(_mm256_min_epi8(_mm256_max_epi8(b, lo), hi), low4);
  };
  storeNibbleBytes64(nibbles(c), nibbles(c + 4), out);
}

// 64 codes of 2 bits (c[v] holds codes 8v .. 8v + 7, one per 32-bit lane, each at most 3) to 16 bytes at
// out, byte k = codes 4k .. 4k + 3 from its low bits up: narrowed to bytes by three packs (lane 0 holds
// codes 0-3 of each c[v], lane 1 codes 4-7), four neighbours joined by two multiply-adds (lo + 4 hi, then
// lo + 16 hi), two packs to one byte per 4 codes (lane 0: codes 0-3 of c[0..7], lane 1: codes 4-7), and
// the lanes' bytes interleaved into element order.
inline void storeTwoBitCodes64(const __m256i* c, uint8_t* out) {
  const __m256i pairs = _mm256_set1_epi16(0x0401), quads = _mm256_set1_epi32(0x00100001);
  const auto joined = [&](const __m256i* v) {
    const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(v[0], v[1]), _mm256_packus_epi32(v[2], v[3]));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(b, pairs), quads);  // one 8-bit value per 32-bit lane
  };
  const __m256i w = _mm256_packus_epi32(joined(c), joined(c + 4));
  const __m256i bytes = _mm256_packus_epi16(w, w);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   _mm_unpacklo_epi8(_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1)));
}

// 8 codes of 4 bits to 4 bytes at out.
inline void storeNibbles8(__m256i codes, uint8_t* out) {
  const __m128i a = nibblePairs(codes);
  const __m128i w = _mm_packus_epi32(a, a);
  const uint32_t word = static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_packus_epi16(w, w)));
  std::memcpy(out, &word, sizeof word);
}

}  // namespace gradcomp::cpu
#endif
