// The narrow element formats of the block-scaled codecs (OCP Microscaling v1.0 and NVFP4): FP8 E4M3 /
// E5M2, FP6 E2M3 / E3M2, FP4 E2M1, and the E8M0 power-of-two scale. Bit-exact fp32 conversions shared by
// the CPU reference and the CUDA kernels, so both emit the same bytes.
//
// A code holds sign | exponent | mantissa in its low `bits` bits. E4M3 keeps S.1111.111 for NaN (no Inf),
// E5M2 has IEEE Inf/NaN (exponent all ones); the FP6 and FP4 formats have neither: every code is a
// finite number. Encoding rounds to nearest even and saturates to the largest finite magnitude (the MX
// specification's conversion for the FP8 elements is saturating too), and never produces a NaN code.
// Subnormal results use the "magic number" addition of float_formats.h: the hardware's own RNE on an
// fp32 whose ulp equals the format's subnormal step.
#pragma once

#include "kernels/scalar/float_formats.h"

namespace gradcomp::scalar {

enum class ElementFormat : uint8_t { E4M3 = 0, E5M2 = 1, E2M3 = 2, E3M2 = 3, E2M1 = 4 };

struct ElementSpec {
  int bits;                // code width: 8, 6 or 4
  int mantBits;
  int bias;
  int emax;                // exponent of the largest normal (the MX shared-scale rule subtracts it)
  uint8_t maxCode;         // largest finite magnitude code (sign bit clear)
  float maxValue;          // its value
  uint32_t minNormalBits;  // fp32 bits of the smallest normal
  float subnormalMagic;    // an fp32 whose ulp is the subnormal step
  float subnormalStep;     // 2^(1 - bias - mantBits)
};

GRADCOMP_HD ElementSpec elementSpec(ElementFormat f) {
  switch (f) {
    case ElementFormat::E4M3: return ElementSpec{8, 3, 7, 8, 0x7e, 448.0f, 0x3c800000u, 0x1p14f, 0x1p-9f};
    case ElementFormat::E5M2: return ElementSpec{8, 2, 15, 15, 0x7b, 57344.0f, 0x38800000u, 0x1p7f, 0x1p-16f};
    case ElementFormat::E2M3: return ElementSpec{6, 3, 1, 2, 0x1f, 7.5f, 0x3f800000u, 0x1p20f, 0x1p-3f};
    case ElementFormat::E3M2: return ElementSpec{6, 2, 3, 4, 0x1f, 28.0f, 0x3e800000u, 0x1p19f, 0x1p-4f};
    default: return ElementSpec{4, 1, 1, 2, 0x07, 6.0f, 0x3f800000u, 0x1p22f, 0x1p-1f};
  }
}

GRADCOMP_HD const char* elementFormatName(ElementFormat f) {
  switch (f) {
    case ElementFormat::E4M3: return "e4m3";
    case ElementFormat::E5M2: return "e5m2";
    case ElementFormat::E2M3: return "e2m3";
    case ElementFormat::E3M2: return "e3m2";
    default: return "e2m1";
  }
}

// fp32 bits at or beyond which a value saturates: the midpoint between the largest finite value and
// the next step of the format (values below it round to at most maxValue anyway).
GRADCOMP_HD uint32_t elementOverflowBits(const ElementSpec& s) {
  return floatBits(s.maxValue) + (1u << (22 - s.mantBits));
}

// fp32 -> code, RNE, saturating (a finite or infinite input never becomes NaN; NaN saturates too:
// the encoders reject non-finite input before converting).
GRADCOMP_HD uint8_t floatToElement(float f, const ElementSpec& s) {
  const uint32_t x = floatBits(f);
  const uint8_t sign = (x >> 31) ? static_cast<uint8_t>(1u << (s.bits - 1)) : uint8_t{0};
  const uint32_t a = x & 0x7fffffffu;
  // NaN saturates like Inf here: the encoders reject non-finite input before converting.
  return sign | static_cast<uint8_t>(minifloatMagnitudeCode(a > 0x7f800000u ? 0x7f800000u : a, s.mantBits, s.bias,
                                                            s.maxCode, floatBits(s.maxValue), s.minNormalBits,
                                                            s.subnormalMagic));
}

// Codes that are not finite numbers: E4M3 S.1111.111, E5M2 S.11111.xx; none in FP6 / FP4.
GRADCOMP_HD bool elementIsFinite(uint8_t c, ElementFormat f) {
  if (f == ElementFormat::E4M3) return (c & 0x7fu) != 0x7fu;
  if (f == ElementFormat::E5M2) return (c & 0x7cu) != 0x7cu;
  return true;
}

// code -> fp32, exact. Non-finite FP8 codes decode to Inf/NaN (validators reject them first).
GRADCOMP_HD float elementToFloat(uint8_t c, const ElementSpec& s, ElementFormat f) {
  const int expBits = s.bits - 1 - s.mantBits;
  const uint32_t sign = static_cast<uint32_t>((c >> (s.bits - 1)) & 1u) << 31;
  const uint32_t exp = (c >> s.mantBits) & ((1u << expBits) - 1u);
  const uint32_t mant = c & ((1u << s.mantBits) - 1u);
  if (!elementIsFinite(c, f)) {
    const bool inf = f == ElementFormat::E5M2 && mant == 0;
    return bitsToFloat(sign | 0x7f800000u | (inf ? 0u : 0x400000u));
  }
  if (exp == 0) return bitsToFloat(floatBits(static_cast<float>(mant) * s.subnormalStep) | sign);
  return bitsToFloat(sign | ((exp + 127u - static_cast<uint32_t>(s.bias)) << 23) | (mant << (23 - s.mantBits)));
}

// ---------------------------------------------------------------- E8M0 (the MX shared scale)

constexpr uint8_t kE8M0Nan = 0xff;

// 2^(code - 127) for code 0..254, exact (2^-127 is the fp32 subnormal 0x00400000).
GRADCOMP_HD float e8m0ToFloat(uint8_t code) {
  if (code == 0) return bitsToFloat(0x00400000u);
  return bitsToFloat(static_cast<uint32_t>(code) << 23);
}

// floor(log2(v)) for finite v > 0, subnormals included.
GRADCOMP_HD int floorLog2(float v) {
  const uint32_t b = floatBits(v) & 0x7fffffffu;
  const int e = static_cast<int>(b >> 23);
  if (e != 0) return e - 127;
  int top = 22;
  while (top > 0 && !((b >> top) & 1u)) --top;
  return -149 + top;
}

// The MX v1.0 shared scale of a block whose largest magnitude is amax: X = 2^(floor(log2 amax) - emax),
// clamped to E8M0's range; an all-zero block gets the smallest scale. Returned as its E8M0 code. For a
// finite amax the exponent is at most 127 - emax, so code x largest element stays finite.
GRADCOMP_HD uint8_t mxSharedScaleCode(float amax, const ElementSpec& s) {
  if (!(amax > 0.0f)) return 0;
  int e = floorLog2(amax) - s.emax;
  e = e < -127 ? -127 : e;
  return static_cast<uint8_t>(e + 127);
}

// 1 / X for the encoder: 2^(127 - code), a normal float for every code the encoder writes
// (code >= 0 gives at most 2^127; code <= 254 - emax gives at least 2^(emax - 127) > 2^-126).
GRADCOMP_HD float mxInverseScale(uint8_t code) { return bitsToFloat(static_cast<uint32_t>(254 - code) << 23); }

// What a decoder accepts as a scale code: not NaN, and largest element x 2^(code - 127) finite.
GRADCOMP_HD bool mxScaleCodeDecodes(uint8_t code, const ElementSpec& s) {
  return code != kE8M0Nan && isFiniteBits(floatBits(mulRn(s.maxValue, e8m0ToFloat(code))));
}

// ---------------------------------------------------------------- NVFP4 (E2M1 elements, E4M3 block scales)

constexpr float kNvfp4ElementMax = 6.0f, kNvfp4ScaleMax = 448.0f;

// The tensor's decode scale t = amax / (6 x 448), so the largest block scale lands on E4M3's maximum.
// Raised to FLT_MIN for a zero or tiny amax so that every block divides by a normal number.
// What a decoder accepts as t: a positive normal float with 6 x 448 x t finite (the decoder's own
// arithmetic on the largest codes: element x fl(blockScale x t)).
GRADCOMP_HD bool nvfp4TensorScaleDecodes(float t) {
  if (!(t >= 0x1p-126f) || !isFiniteBits(floatBits(t))) return false;
  return isFiniteBits(floatBits(mulRn(kNvfp4ElementMax, mulRn(kNvfp4ScaleMax, t))));
}

// Lowered by ulps for an amax within a few ulps of FLT_MAX, where the rounded quotient would not decode.
GRADCOMP_HD float nvfp4TensorScale(float amax) {
  if (!(amax > 0.0f) || !isFiniteBits(floatBits(amax))) return 0x1p-126f;
  float t = divRn(amax, kNvfp4ElementMax * kNvfp4ScaleMax);
  if (!(t >= 0x1p-126f)) return 0x1p-126f;
  while (!nvfp4TensorScaleDecodes(t)) t = bitsToFloat(floatBits(t) - 1u);
  return t;
}

// A block's E4M3 scale code from its amax: RNE of amax / (6 t), saturating at 448.
GRADCOMP_HD uint8_t nvfp4BlockScaleCode(float amax, float t) {
  return floatToFp8(divRn(amax, mulRn(kNvfp4ElementMax, t)), Fp8Format::E4M3);
}

// The factor a block's codes are divided by (encode) and multiplied with (decode): fl(scale x t).
GRADCOMP_HD float nvfp4BlockFactor(uint8_t scaleCode, float t) {
  return mulRn(fp8ToFloat(scaleCode, Fp8Format::E4M3), t);
}

// A valid NVFP4 block scale code: a finite, non-negative E4M3 number.
GRADCOMP_HD bool nvfp4ScaleCodeValid(uint8_t code) { return code < 0x7fu; }

}  // namespace gradcomp::scalar
