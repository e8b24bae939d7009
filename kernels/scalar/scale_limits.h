// Which per-block factors a decoder can use without overflow, and the factors the encoders write.
//
// A decoder turns a code into a value with one product: int8 and fp8 decode code x fl(1 / scale), fp16
// decodes code x fl(1 / prescale), qsgd decodes level x fl(norm / s), random-k (unbiased) value x n/k.
// A finite wire value can still make that product overflow: an int8 scale of 1e-40 (one flipped exponent
// bit) has 1/scale = Inf, and an fp16 pre-scale of 1.2e-38 gives 65504 x 8.3e37 = Inf. So the rule
// checked here is the decoder's own arithmetic on the largest code the format allows: rounding is
// monotone, so if the largest code decodes to a finite value every code does. Exact by construction,
// and the same arithmetic (addRn / mulRn / divRn) on the CPU and in the CUDA kernels.
//
// The bounds this gives (tests/kernels/scale_limits_test.cc pins them):
//   int8 scale (largest code 127):   s >= 3.73219501e-37 (one ulp above fl(127 / FLT_MAX), which fails)
//   fp8 E4M3 scale (448):            s >= 1.31655376e-36;  E5M2 (57344): s >= 1.68518882e-34
//   fp16 pre-scale (65504):          p >= 1.92498978e-34
//   qsgd norm, s levels:             norm <= FLT_MAX for s = 1, 3, 7, 15, 63; one ulp below it for 31, 127
// Encoders never write a factor outside these ranges: blockScaleFor raises a scale by ulps until it
// decodes (only for amax within a few ulps of FLT_MAX), qsgdWireNorm lowers a norm likewise (and caps a
// norm beyond FLT_MAX: two values of 2.4e38 have an L2 norm of 3.4e38 * sqrt(2)).
#pragma once

#include <cfloat>
#include <cmath>

#include "kernels/scalar/float_formats.h"

namespace gradcomp::scalar {

GRADCOMP_HD bool isFiniteFloat(float v) { return isFiniteBits(floatBits(v)); }

// The next float towards +Inf / towards 0, for positive finite v (nextafterf without the library call).
GRADCOMP_HD float nextUp(float v) { return bitsToFloat(floatBits(v) + 1u); }
GRADCOMP_HD float nextDown(float v) { return bitsToFloat(floatBits(v) - 1u); }

// value = code x fl(1 / scale) with |code| <= maxCode (int8: 127; fp8: 448 / 57344; fp16: 65504).
GRADCOMP_HD bool reciprocalScaleDecodes(float scale, float maxCode) {
  if (!(scale > 0.0f) || !isFiniteFloat(scale)) return false;  // NaN, zero, negative, Inf
  return isFiniteFloat(mulRn(maxCode, divRn(1.0f, scale)));
}

// The block scale of int8 / fp8: TransformerEngine's rules (amax 0 or non-finite -> 1; maxCode / amax
// correctly rounded; a quotient that overflows -> FLT_MAX), then raised to the first scale that decodes.
// Raising it makes |x| x scale at most a few ulps above maxCode, which the encoders clamp to maxCode.
GRADCOMP_HD float blockScaleFor(float amax, float maxCode) {
  if (!(amax > 0.0f) || !isFiniteFloat(amax)) return 1.0f;
  float s = divRn(maxCode, amax);
  if (!isFiniteFloat(s)) return FLT_MAX;
  while (!reciprocalScaleDecodes(s, maxCode)) s = nextUp(s);
  return s;
}

// qsgd with s levels: value = level x fl(norm / s), level <= s.
GRADCOMP_HD bool qsgdNormDecodes(float norm, int levels) {
  if (!(norm >= 0.0f) || !isFiniteFloat(norm)) return false;
  const float s = static_cast<float>(levels);
  return isFiniteFloat(mulRn(s, divRn(norm, s)));
}

// The norm a block puts on the wire from its sum of squares (in double): sqrt correctly rounded to fp32,
// capped at FLT_MAX and lowered by ulps to the largest norm that decodes. Values stay <= that norm in
// magnitude but for those within a few ulps of FLT_MAX, which the level clamp (<= s) takes care of.
GRADCOMP_HD float qsgdWireNorm(double sumSquares, int levels) {
#if defined(__CUDA_ARCH__)
  const double r = sqrt(sumSquares);
#else
  const double r = std::sqrt(sumSquares);
#endif
  // Compared in double before narrowing, so no double beyond the float range is ever converted.
  float norm = r >= static_cast<double>(FLT_MAX) ? FLT_MAX : static_cast<float>(r);
  while (!qsgdNormDecodes(norm, levels)) norm = nextDown(norm);
  return norm;
}

// A power of two 2^k that brings v (> 0, finite) into [2^-23, 4): the factor that keeps a ratio x / v
// computed as (x * 2^k) * fl(1 / (v * 2^k)) in the normal range. Both products by 2^k are exact (x <= v,
// so x * 2^k never overflows; an x whose product leaves the normal range is so far below v that its
// ratio is below 2^-120, which no 24-bit uniform draw can round up to a level). k is in [-126, 126], so
// 2^k is a normal float on every backend, flush-to-zero or not.
GRADCOMP_HD float powerOfTwoNormalizer(float v) {
  uint32_t e = (floatBits(v) >> 23) & 0xffu;
  int exponent;
  if (e == 0) {  // subnormal: scale by 2^64 (exact) to read its exponent
    e = (floatBits(mulRn(v, 18446744073709551616.0f)) >> 23) & 0xffu;
    exponent = static_cast<int>(e) - 127 - 64;
  } else {
    exponent = static_cast<int>(e) - 127;
  }
  int k = -exponent;
  k = k > 126 ? 126 : (k < -126 ? -126 : k);
  return bitsToFloat(static_cast<uint32_t>(127 + k) << 23);
}

// How a block maps |c| to the ratio |c| / v: ratio = (|c| * pre) * inv. In the usual range of v
// (2^-100 .. 2^100) pre is 1 and inv = fl(1/v) or fl(s/v) exactly as the codecs always computed it, so
// those bytes are unchanged; outside it (where s / v would overflow or lose bits as a subnormal) pre
// normalizes v first. `numerator` is s for qsgd, 1 for terngrad.
struct RatioScaling {
  float pre = 1.0f;
  float inv = 0.0f;  // 0 when v == 0: every ratio is 0
};
GRADCOMP_HD RatioScaling ratioScaling(float numerator, float v) {
  RatioScaling r;
  if (!(v > 0.0f)) return r;
  constexpr float kLow = 0x1p-100f, kHigh = 0x1p100f;
  if (v >= kLow && v <= kHigh) {
    r.inv = divRn(numerator, v);
    return r;
  }
  r.pre = powerOfTwoNormalizer(v);
  r.inv = divRn(numerator, mulRn(v, r.pre));
  return r;
}
GRADCOMP_HD float scaledRatio(float absC, const RatioScaling& r) {
  return r.pre == 1.0f ? mulRn(absC, r.inv) : mulRn(mulRn(absC, r.pre), r.inv);
}

// random-k with unbiased=true decodes value x fl(n/k) (scale >= 1). The encoder clamps fp32 values to the
// largest magnitude whose product is finite (saturations counted); fp16 values (<= 65504) never need it,
// since n/k <= 2^64.
GRADCOMP_HD bool scaledValueDecodes(float value, float scale) { return isFiniteFloat(mulRn(value, scale)); }
GRADCOMP_HD float largestScaledValue(float scale) {
  float v = divRn(FLT_MAX, scale);
  while (!scaledValueDecodes(v, scale)) v = nextDown(v);
  while (v < FLT_MAX && scaledValueDecodes(nextUp(v), scale)) v = nextUp(v);
  return v;
}
GRADCOMP_HD float clampMagnitude(float c, float limit) { return c > limit ? limit : (c < -limit ? -limit : c); }

// What a decoder accepts as a block's factor (scale, norm or maximum), one rule per codec, checked by the
// CPU validators and the CUDA validation kernel alike.
struct ScaleRule {
  bool allowZero = false;   // qsgd, terngrad, sign: an all-zero block stores 0
  float reciprocalOf = 0;   // int8 / fp8: the largest code, decoded as code x fl(1 / scale); 0: no such use
  int qsgdLevels = 0;       // qsgd: decoded as level x fl(norm / s); 0: no such use
};

GRADCOMP_HD bool scaleAccepted(float v, const ScaleRule& r) {
  if (!(isFiniteFloat(v) && v >= 0.0f && (r.allowZero || v > 0.0f))) return false;
  if (r.reciprocalOf > 0.0f && !reciprocalScaleDecodes(v, r.reciprocalOf)) return false;
  if (r.qsgdLevels > 0 && !qsgdNormDecodes(v, r.qsgdLevels)) return false;
  return true;
}

// The bounds these rules imply, for error messages and tests: the smallest scale whose reciprocal decodes
// maxCode (a binary search over the bit patterns of positive floats, on which the rule is monotone), and
// the largest qsgd norm that decodes.
inline float smallestDecodableScale(float maxCode) {
  uint32_t lo = 1, hi = floatBits(FLT_MAX);  // hi always decodes
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (reciprocalScaleDecodes(bitsToFloat(mid), maxCode)) hi = mid;
    else lo = mid + 1;
  }
  return bitsToFloat(lo);
}
inline float largestDecodableQsgdNorm(int levels) {
  float v = FLT_MAX;
  while (!qsgdNormDecodes(v, levels)) v = nextDown(v);
  return v;
}

}  // namespace gradcomp::scalar
