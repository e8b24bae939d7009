// The largest magnitude of a block on AVX2, shared by the block encoders (block_scale_kernels.cc's int4,
// microscaling_kernels_avx2.cc's MX / NVFP4): max of |x| bits by an unsigned compare (order-free, so
// exact), 8 lanes, reduced in registers.
#pragma once

#if defined(__AVX2__)
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace gradcomp::cpu {

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
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(m));
}

}  // namespace gradcomp::cpu
#endif
