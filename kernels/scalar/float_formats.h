// Bit-exact conversions between fp32 and the 16- and 8-bit wire formats: fp16 (IEEE binary16), bf16,
// and OCP FP8 E4M3 / E5M2. Round to nearest even everywhere. Encoders saturate: a finite input never
// becomes Inf, and callers count the saturations. Shared by CPU and CUDA so both emit the same bytes.
//
// Subnormal results are produced by adding a "magic" float whose ulp equals the target format's
// subnormal step: the hardware's own round-to-nearest-even does the rounding, which is the same on
// x86 and on CUDA (__fadd_rn, never contracted into an FMA).
#pragma once

#include "kernels/scalar/host_device.h"

namespace gradcomp::scalar {

GRADCOMP_HD float addRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// The other fp32 operations rounded to nearest even, never fused into an FMA on either side.
GRADCOMP_HD float subRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

GRADCOMP_HD float mulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

GRADCOMP_HD float divRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// ---------------------------------------------------------------- fp16

constexpr uint16_t kHalfMaxBits = 0x7bff;         // 65504
constexpr uint32_t kHalfOverflowFloatBits = 0x477ff000u;  // 65520: the first |x| that rounds to Inf

// Saturating fp32 -> fp16, RNE. NaN -> quiet NaN with the sign kept (callers reject NaN earlier).
GRADCOMP_HD uint16_t floatToHalfBits(float f) {
  uint32_t x = floatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00u;
  if (x >= kHalfOverflowFloatBits) return sign | kHalfMaxBits;  // saturate (Inf included)
  if (x < 0x38800000u) {                                         // below 2^-14: subnormal or zero
    // 0.5f has ulp 2^-24, the fp16 subnormal step.
    const float magic = 0.5f;
    uint32_t r = floatBits(addRn(bitsToFloat(x), magic)) - floatBits(magic);
    return sign | static_cast<uint16_t>(r);
  }
  const uint32_t odd = (x >> 13) & 1u;
  x += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and add the RNE rounding increment
  return sign | static_cast<uint16_t>(x >> 13);
}

GRADCOMP_HD float halfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Subnormal: mant * 2^-24, exact in fp32.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return bitsToFloat(floatBits(v) | sign);
  }
  if (exp == 31) return bitsToFloat(sign | 0x7f800000u | (mant << 13));
  return bitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

GRADCOMP_HD bool halfIsFinite(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }

// ---------------------------------------------------------------- bf16

constexpr uint16_t kBf16MaxBits = 0x7f7f;

// Saturating fp32 -> bf16, RNE.
GRADCOMP_HD uint16_t floatToBf16Bits(float f) {
  const uint32_t x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  if ((r & 0x7f80u) == 0x7f80u) r = (r & 0x8000u) | kBf16MaxBits;  // rounded (or was) Inf: saturate
  return static_cast<uint16_t>(r);
}

// True when RNE would have produced Inf from this value (a saturation the caller counts).
GRADCOMP_HD bool bf16Overflows(float f) {
  const uint32_t x = floatBits(f) & 0x7fffffffu;
  return x <= 0x7f800000u && x >= 0x7f7f8000u;  // >= midpoint above bf16 max, Inf included
}

GRADCOMP_HD float bf16BitsToFloat(uint16_t b) { return bitsToFloat(static_cast<uint32_t>(b) << 16); }

GRADCOMP_HD bool bf16IsFinite(uint16_t b) { return (b & 0x7f80u) != 0x7f80u; }

// ---------------------------------------------------------------- OCP FP8

enum class Fp8Format : uint8_t { E4M3 = 0, E5M2 = 1 };

struct Fp8Spec {
  int mantBits;
  int bias;
  uint8_t maxCode;      // largest finite magnitude code
  float maxValue;       // its value
  uint32_t minNormalBits;  // fp32 bits of the smallest normal
  float subnormalMagic; // fp32 whose ulp is the fp8 subnormal step
};

GRADCOMP_HD Fp8Spec fp8Spec(Fp8Format f) {
  if (f == Fp8Format::E4M3) return Fp8Spec{3, 7, 0x7e, 448.0f, 0x3c800000u /*2^-6*/, 16384.0f /*ulp 2^-9*/};
  return Fp8Spec{2, 15, 0x7b, 57344.0f, 0x38800000u /*2^-14*/, 128.0f /*ulp 2^-16*/};
}

// The magnitude code of |x| (fp32 bits of a non-NaN value) in a minifloat with mantBits mantissa bits and
// exponent bias `bias`: round to nearest even, saturating at maxCode (whose value has fp32 bits
// maxValueBits; Inf saturates too). Below the smallest normal (fp32 bits minNormalBits) the "magic"
// addition rounds to the subnormal grid. Shared by the FP8 codecs and the MX / NVFP4 element formats
// (element_formats.h).
GRADCOMP_HD uint32_t minifloatMagnitudeCode(uint32_t x, int mantBits, int bias, uint32_t maxCode, uint32_t maxValueBits,
                                            uint32_t minNormalBits, float subnormalMagic) {
  if (x >= maxValueBits) return maxCode;
  if (x < minNormalBits) return floatBits(addRn(bitsToFloat(x), subnormalMagic)) - floatBits(subnormalMagic);
  const int shift = 23 - mantBits;
  const uint32_t odd = (x >> shift) & 1u;
  x += (static_cast<uint32_t>(bias - 127) << 23) + ((1u << (shift - 1)) - 1u) + odd;
  const uint32_t code = x >> shift;
  return code > maxCode ? maxCode : code;
}

// Saturating (SATFINITE) fp32 -> fp8, RNE: |x| > max -> max, Inf -> max, NaN -> NaN.
GRADCOMP_HD uint8_t floatToFp8(float f, Fp8Format fmt) {
  const Fp8Spec s = fp8Spec(fmt);
  const uint32_t x = floatBits(f) & 0x7fffffffu;
  const uint8_t sign = static_cast<uint8_t>((floatBits(f) >> 24) & 0x80u);
  if (x > 0x7f800000u) return sign | 0x7fu;  // NaN (0x7f is NaN in both flavours)
  return sign | static_cast<uint8_t>(minifloatMagnitudeCode(x, s.mantBits, s.bias, s.maxCode, floatBits(s.maxValue),
                                                            s.minNormalBits, s.subnormalMagic));
}

// Codes that are not finite numbers: E4M3 S.1111.111; E5M2 S.11111.xx.
GRADCOMP_HD bool fp8IsFinite(uint8_t c, Fp8Format fmt) {
  return fmt == Fp8Format::E4M3 ? (c & 0x7fu) != 0x7fu : (c & 0x7cu) != 0x7cu;
}

GRADCOMP_HD float fp8ToFloat(uint8_t c, Fp8Format fmt) {
  const Fp8Spec s = fp8Spec(fmt);
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const int expBits = 7 - s.mantBits;
  const uint32_t exp = (c >> s.mantBits) & ((1u << expBits) - 1u);
  const uint32_t mant = c & ((1u << s.mantBits) - 1u);
  if (!fp8IsFinite(c, fmt)) {
    const bool inf = fmt == Fp8Format::E5M2 && mant == 0;
    return bitsToFloat(sign | 0x7f800000u | (inf ? 0u : 0x400000u));
  }
  if (exp == 0) {  // subnormal: mant * 2^(1 - bias - mantBits), exact
    const float step = bitsToFloat(static_cast<uint32_t>(127 + 1 - s.bias - s.mantBits) << 23);
    return bitsToFloat(floatBits(static_cast<float>(mant) * step) | sign);
  }
  return bitsToFloat(sign | ((exp + 127u - static_cast<uint32_t>(s.bias)) << 23) | (mant << (23 - s.mantBits)));
}

}  // namespace gradcomp::scalar
