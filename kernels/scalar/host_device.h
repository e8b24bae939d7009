// Lets the scalar math be shared verbatim by the CPU reference and the CUDA kernels, so that both
// paths produce the same bytes.
#pragma once

#if defined(__CUDACC__)
#define GRADCOMP_HD __host__ __device__ __forceinline__
#else
#define GRADCOMP_HD inline
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gradcomp::scalar {

GRADCOMP_HD uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

GRADCOMP_HD float bitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// |x| as bits; for finite x this is monotone in |x|, which the radix top-k relies on.
GRADCOMP_HD uint32_t absBits(float f) { return floatBits(f) & 0x7fffffffu; }

GRADCOMP_HD bool isFiniteBits(uint32_t bits) { return (bits & 0x7f800000u) != 0x7f800000u; }

// The index of the first NaN/Inf among x[0, n), or n. The encoders call it only after a block's maximum
// came out non-finite, to name the offending element in their error, so a plain scan is enough.
GRADCOMP_HD size_t firstNonFiniteIndex(const float* x, size_t n) {
  size_t i = 0;
  while (i < n && isFiniteBits(absBits(x[i]))) ++i;
  return i;
}

}  // namespace gradcomp::scalar
