#include "kernels/cpu/march_intrinsics.h"  // first: its pragmas must precede <immintrin.h>

#include "kernels/cpu/hadamard_rotation.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/cpu/philox_batches.h"

namespace gradcomp::cpu {

using namespace scalar;

namespace {

#if defined(__AVX2__) && !defined(__AVX512F__)
// The stages of span 1, 2 and 4 inside one register. The lower lane of each pair takes a + b and the upper
// a - b, the scalar loop's two values: with x the lane's own value and t its partner's, x + t below and
// (-x) + t above, which is t - x exactly (negation is exact and IEEE addition commutes). That is a sign
// flip and one add per stage where an add, a subtract and a blend took three, and the partners come from
// in-lane permutes for spans 1 and 2.
inline __m256 inRegisterStages8(__m256 x) {
  const __m256 upper1 = _mm256_castsi256_ps(_mm256_setr_epi32(0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN));
  const __m256 upper2 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, INT32_MIN, INT32_MIN, 0, 0, INT32_MIN, INT32_MIN));
  const __m256 upper4 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, 0, 0, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN));
  x = _mm256_add_ps(_mm256_xor_ps(x, upper1), _mm256_permute_ps(x, 0xb1));           // lanes i ^ 1
  x = _mm256_add_ps(_mm256_xor_ps(x, upper2), _mm256_permute_ps(x, 0x4e));           // lanes i ^ 2
  x = _mm256_add_ps(_mm256_xor_ps(x, upper4), _mm256_permute2f128_ps(x, x, 0x01));  // lanes i ^ 4
  return x;
}

// The stages of span 8, 16 and 32 across eight registers of 8 lanes: register k with register k ^ span / 8.
inline void acrossRegisterStages8(__m256 (&r)[8]) {
  for (int span = 1; span < 8; span <<= 1)
    for (int k = 0; k < 8; ++k)
      if (!(k & span)) {
        const __m256 a = r[k], b = r[k + span];
        r[k] = _mm256_add_ps(a, b);
        r[k + span] = _mm256_sub_ps(a, b);
      }
}

#endif

// In-place unnormalized Walsh-Hadamard transform of one block (size a power of two): stage by stage,
// the order the CUDA twin uses too. The stages of span 1, 2 and 4 run on 8-element chunks (their inner
// loops would be 1-4 long), in registers where the build has AVX2 / AVX-512 (AVX2: spans up to 32 in
// the eight registers of a 64-element chunk); from there on the inner loop over j is contiguous and
// vectorizes. Every output is the same a + b or a - b of the same two values as in the plain loop, so the
// bits do not change.
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
  if (size >= 64) {
    // 64 elements in 8 registers: the stages of span 1-4 inside each, then those of span 8, 16 and 32
    // between registers, stored once: three passes over the block fewer than one stage per pass.
    for (size_t i = 0; i < size; i += 64) {
      __m256 r[8];
      for (int k = 0; k < 8; ++k) r[k] = inRegisterStages8(_mm256_loadu_ps(v + i + 8 * k));
      acrossRegisterStages8(r);
      for (int k = 0; k < 8; ++k) _mm256_storeu_ps(v + i + 8 * k, r[k]);
    }
    h = 64;
  } else if (size >= 8) {
    for (size_t i = 0; i < size; i += 8) _mm256_storeu_ps(v + i, inRegisterStages8(_mm256_loadu_ps(v + i)));
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
// 128 elements. Whole 32-element words go through a fixed-length loop, mask k = word << (31 - k) with the
// other bits cleared, which the compiler turns into variable vector shifts; a per-element loop (shift
// down, then up) took a third of rotation + int4's time on an AVX2 CPU, where the AVX-512 block path
// (forwardBlock) does not run. Flipping the sign bit is exactly the product with -1.0f for every non-NaN
// value, the CUDA twin's and the definition's.
void signMasks(const RngStream& s, uint64_t first, size_t count, uint32_t* masks) {
  const auto one = [&first, masks](const uint32_t (&words)[4], size_t j) {
    const uint32_t e = static_cast<uint32_t>((first + j) & 127u);
    masks[j] = ((words[e >> 5] >> (e & 31u)) & 1u) << 31;
  };
  size_t j = 0;
  while (j < count) {
    const uint64_t blockIndex = (first + j) >> 7;
    const Philox4 w = s.block(blockIndex);
    const uint32_t words[4] = {w.v[0], w.v[1], w.v[2], w.v[3]};
    const size_t end = std::min<uint64_t>(count, ((blockIndex + 1) << 7) - first);
    for (; j < end && ((first + j) & 31u); ++j) one(words, j);
    for (; j + 32 <= end; j += 32) {
      const uint32_t word = words[((first + j) >> 5) & 3u];
      for (uint32_t k = 0; k < 32; ++k) masks[j + k] = (word << (31u - k)) & 0x80000000u;
    }
    for (; j < end; ++j) one(words, j);
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

// D's signs for a run of rotation blocks (bit b of word k: the sign of element 32k + b of the stream):
// the Philox words of the calls that cover them, made 64 or 32 calls at a time on the vector paths (one scalar
// call per 128 elements, per block, took 15% of rotation + int4's encode time on an AVX-512 EPYC). The
// blocks come in order and the window moves forward to cover each; it stops at `end`, the run's last
// element, so no call past the run is made but to round up to a batch.
class SignWords {
 public:
  SignWords(const RngStream& s, uint64_t end) : s_(s), end_(end) {}
  // Makes elements [e, e + size) available (size at most 8192, the largest block).
  void cover(uint64_t e, size_t size) {
    if (e >= begin_ && e + size <= covered_) return;
    begin_ = e & ~uint64_t{127};
    const uint64_t needed = (std::max<uint64_t>(end_, e + size) - begin_ + 127) / 128;
    const size_t calls = static_cast<size_t>(std::min<uint64_t>(kCalls, (needed + 31) & ~uint64_t{31}));
    philoxWordsInOrder(s_, begin_ >> 7, calls, words_);
    covered_ = begin_ + 128 * calls;
  }
  // The 32 signs of elements e .. e + 31 (e a multiple of 32), or the 16 of e .. e + 15 (e a multiple
  // of 16): two bytes of the words' little-endian stream, one load.
  uint32_t word32(uint64_t e) const { return words_[(e - begin_) >> 5]; }
  uint16_t lanes16(uint64_t e) const {
    uint16_t m;
    std::memcpy(&m, reinterpret_cast<const unsigned char*>(words_) + ((e - begin_) >> 3), sizeof m);
    return m;
  }

 private:
  static constexpr size_t kCalls = 96;  // 12288 elements: a block of 8192 at any offset within a call
  const RngStream& s_;
  uint64_t end_, begin_ = 0, covered_ = 0;
  uint32_t words_[4 * kCalls];
};

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

#if defined(__AVX512F__)
// One block of 16 or more elements in one pass over it, the same operations on the same values as the
// generic steps below (so the same bits; only independent butterflies are reordered): D's signs straight
// from the Philox words as lane masks, the stages of span 1, 2, 4, 8 inside a register and those up to
// span 128 across registers, 256 elements at a time; wider stages over the block in memory (in L1: at
// most 32 KiB); the final product folded into the last stage's stores. `first` is the block's first
// element in the tensor (the sign stream's index).

// The lane masks of span 1, 2, 4, 8: set where lane i's bit `span` is set (the pair's upper element).
constexpr __mmask16 kUpperLanes[4] = {0xaaaa, 0xcccc, 0xf0f0, 0xff00};

inline __m512 partnerLanes(__m512 x, int stage) {
  switch (stage) {
    case 0: return _mm512_permute_ps(x, 0xb1);           // lanes i ^ 1
    case 1: return _mm512_permute_ps(x, 0x4e);           // lanes i ^ 2
    case 2: return _mm512_shuffle_f32x4(x, x, 0xb1);     // lanes i ^ 4
    default: return _mm512_shuffle_f32x4(x, x, 0x4e);    // lanes i ^ 8
  }
}

// The lower lane of each pair takes a + b, the upper a - b (with x the lane's own value and t its partner's:
// x + t below, t - x above): the scalar loop's two values. t - x is (-x) + t exactly (negation is exact and
// IEEE addition commutes), so a stage is a sign flip of the upper lanes and one add: the FP adder, which
// takes one 16-lane operation per cycle on Zen 4, does 4 operations for these stages instead of 8 (an add
// and a masked subtract per stage): the forward rotation 0.35 -> 0.32 ns per element in L2 on an AVX-512 EPYC.
inline __m512 inRegisterStages(__m512 x) {
  const __m512i signBit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  for (int stage = 0; stage < 4; ++stage) {
    const __m512 t = partnerLanes(x, stage);
    const __m512i xi = _mm512_castps_si512(x);
    x = _mm512_add_ps(_mm512_castsi512_ps(_mm512_mask_xor_epi32(xi, kUpperLanes[stage], xi, signBit)), t);
  }
  return x;
}

// The stages of span 16 x kRegs / 2 and below that cross registers: register j with register j + k.
template <int kRegs>
inline void acrossRegisterStages(__m512* r) {
#pragma GCC unroll 16
  for (int k = 1; k < kRegs; k <<= 1)
#pragma GCC unroll 16
    for (int j = 0; j < kRegs; ++j)
      if (!(j & k)) {
        const __m512 a = r[j], b = r[j + k];
        r[j] = _mm512_add_ps(a, b);
        r[j + k] = _mm512_sub_ps(a, b);
      }
}

// The stages of span `from` .. size / 2 over v in memory (blocks past 256 elements); the last one's
// outputs go through `last` before they are stored.
template <typename Last>
void wideStages(float* v, size_t size, size_t from, Last&& last) {
  for (size_t h = from; h < size; h <<= 1) {
    const bool final = 2 * h == size;
    for (size_t i = 0; i < size; i += 2 * h)
      for (size_t j = 0; j < h; j += 16) {
        const __m512 a = _mm512_loadu_ps(v + i + j), b = _mm512_loadu_ps(v + i + j + h);
        __m512 s = _mm512_add_ps(a, b), d = _mm512_sub_ps(a, b);
        if (final) {
          s = last(s, i + j);
          d = last(d, i + j + h);
        }
        _mm512_storeu_ps(v + i + j, s);
        _mm512_storeu_ps(v + i + j + h, d);
      }
  }
}

// Up to 256 elements (kRegs registers) transformed in registers: `load(j)` gives register j's 16
// inputs, `finish(v, j)` maps its outputs when the group is the whole block (else they are stored as
// they are, for the wide stages).
template <int kRegs, typename Load, typename Finish>
inline void registerGroup(float* out, bool wholeBlock, Load&& load, Finish&& finish) {
  __m512 r[kRegs];
#pragma GCC unroll 16
  for (int j = 0; j < kRegs; ++j) r[j] = inRegisterStages(load(j));
  acrossRegisterStages<kRegs>(r);
#pragma GCC unroll 16
  for (int j = 0; j < kRegs; ++j) _mm512_storeu_ps(out + 16 * j, wholeBlock ? finish(r[j], 16 * j) : r[j]);
}

// The block in groups of min(size, 256) elements, then the wider stages.
template <typename LoadAt, typename Finish>
void transformBlock(float* out, size_t size, LoadAt&& loadAt, Finish&& finish) {
  const size_t group = size < 256 ? size : 256;
  for (size_t g = 0; g < size; g += group) {
    auto load = [&](int j) { return loadAt(g + 16 * static_cast<size_t>(j)); };
    auto finishAt = [&](__m512 v, size_t j) { return finish(v, g + j); };
    float* o = out + g;
    const bool whole = group == size;
    switch (group) {
      case 16: registerGroup<1>(o, whole, load, finishAt); break;
      case 32: registerGroup<2>(o, whole, load, finishAt); break;
      case 64: registerGroup<4>(o, whole, load, finishAt); break;
      case 128: registerGroup<8>(o, whole, load, finishAt); break;
      default: registerGroup<16>(o, whole, load, finishAt); break;
    }
  }
  if (size > 256) wideStages(out, size, 256, finish);
}

// maxBits: the running largest |x| (fp32 bits) of the inputs as they are read (two instructions per 16
// elements; the encoder's check for NaN/Inf and huge values without a pass of its own).
void forwardBlock(const float* x, float* y, size_t size, SignWords& signs, uint64_t first, float prescale,
                  __m512i& maxBits) {
  const __m512 scale = _mm512_set1_ps(prescale), norm = _mm512_set1_ps(rotationNorm(size));
  const __m512i signBit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff);
  signs.cover(first, size);
  // A prescale of 1 (2^0: every tensor below 2^100) leaves each value as it is: its product is skipped.
  auto run = [&](auto scaled) {
    transformBlock(
        y, size,
        [&](size_t j) {
          const __m512 in = _mm512_loadu_ps(x + j);
          maxBits = _mm512_max_epu32(maxBits, _mm512_and_si512(_mm512_castps_si512(in), absMask));
          const __m512i v = _mm512_castps_si512(scaled(in));
          return _mm512_castsi512_ps(_mm512_mask_xor_epi32(v, signs.lanes16(first + j), v, signBit));
        },
        [&](__m512 v, size_t) { return _mm512_mul_ps(v, norm); });
  };
  if (prescale == 1.0f) {
    run([](__m512 v) { return v; });
  } else {
    run([&](__m512 v) { return _mm512_mul_ps(v, scale); });
  }
}

// saturatingScale on 16 lanes: a finite value whose product overflows becomes +-FLT_MAX.
inline __m512 saturatingScale16(__m512 v, __m512 scale) {
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff), infBits = _mm512_set1_epi32(0x7f800000);
  const __m512 r = _mm512_mul_ps(v, scale);
  const __m512i vi = _mm512_castps_si512(v), ri = _mm512_castps_si512(r);
  const __mmask16 overflowed = _mm512_cmpeq_epi32_mask(_mm512_and_si512(ri, absMask), infBits) &
                               _mm512_cmplt_epu32_mask(_mm512_and_si512(vi, absMask), infBits);
  const __m512i saturated = _mm512_or_si512(_mm512_andnot_si512(absMask, vi), _mm512_set1_epi32(0x7f7fffff));
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(ri, overflowed, saturated));
}

void inverseBlock(const float* y, float* x, size_t size, SignWords& signs, uint64_t first, float postscale) {
  const __m512 scale = _mm512_set1_ps(postscale), norm = _mm512_set1_ps(rotationNorm(size));
  const __m512i signBit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  signs.cover(first, size);
  // x = saturatingScale(flipped(v x norm, D), postscale) for the transform's output v at element j. A
  // postscale of 1 (2^0: every tensor below 2^100) leaves every value as it is and never overflows, so
  // the product and the saturation test are skipped there, as on the AVX2 path.
  auto flippedAt = [&](__m512 v, size_t j) {
    const __m512i f = _mm512_castps_si512(_mm512_mul_ps(v, norm));
    return _mm512_castsi512_ps(_mm512_mask_xor_epi32(f, signs.lanes16(first + j), f, signBit));
  };
  auto load = [&](size_t j) { return _mm512_loadu_ps(y + j); };
  if (postscale == 1.0f) {
    transformBlock(x, size, load, flippedAt);
  } else {
    transformBlock(x, size, load, [&](__m512 v, size_t j) { return saturatingScale16(flippedAt(v, j), scale); });
  }
}
#elif defined(__AVX2__)
// The FWHT's stages of span 64 .. size / 2 over v in memory (in L1), two at a time (spans h and 2h over
// four vectors at j, j + h, j + 2h, j + 3h: the same sums and differences of the same values as two
// separate stages, with one load and one store per vector instead of two), then a last single stage
// when their count is odd. The last stage's outputs go through `last(v, element)` before they are stored.
template <typename Last>
void wideStagesAvx2(float* v, size_t size, Last&& last) {
  size_t h = 64;
  for (; 4 * h <= size; h <<= 2) {
    const bool final = 4 * h == size;
    for (size_t i = 0; i < size; i += 4 * h)
      for (size_t j = i; j < i + h; j += 8) {
        float* p = v + j;
        const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + h);
        const __m256 c = _mm256_loadu_ps(p + 2 * h), d = _mm256_loadu_ps(p + 3 * h);
        const __m256 ab = _mm256_add_ps(a, b), aMinusB = _mm256_sub_ps(a, b);
        const __m256 cd = _mm256_add_ps(c, d), cMinusD = _mm256_sub_ps(c, d);
        __m256 o0 = _mm256_add_ps(ab, cd), o1 = _mm256_add_ps(aMinusB, cMinusD);
        __m256 o2 = _mm256_sub_ps(ab, cd), o3 = _mm256_sub_ps(aMinusB, cMinusD);
        if (final) {
          o0 = last(o0, j), o1 = last(o1, j + h), o2 = last(o2, j + 2 * h), o3 = last(o3, j + 3 * h);
        }
        _mm256_storeu_ps(p, o0);
        _mm256_storeu_ps(p + h, o1);
        _mm256_storeu_ps(p + 2 * h, o2);
        _mm256_storeu_ps(p + 3 * h, o3);
      }
  }
  if (h < size) {  // 2h == size
    for (size_t j = 0; j < h; j += 8) {
      const __m256 a = _mm256_loadu_ps(v + j), b = _mm256_loadu_ps(v + j + h);
      _mm256_storeu_ps(v + j, last(_mm256_add_ps(a, b), j));
      _mm256_storeu_ps(v + j + h, last(_mm256_sub_ps(a, b), j + h));
    }
  }
}

// The forward rotation of one block of 64 or more elements on AVX2, the same operations on the same values
// as the generic steps in rotateForward (so the same bits; only independent butterflies are reordered):
// each 64-element group is loaded once, scaled and sign-flipped as it is loaded (D's signs straight from
// the Philox word by variable shifts), taken through the stages of span 1-32 in eight registers, and
// stored; the wider stages run over the block in memory (in L1), the last one multiplied by the norm
// before it is stored. One pass over the input instead of the generic path's four (signs, flip, FWHT,
// norm); docs/notes.md has the timings.

// maxBits: the running largest |x| (fp32 bits) of the inputs as they are read, as forwardBlock's.
void forwardBlockAvx2(const float* x, float* y, size_t size, SignWords& signs, uint64_t first, float prescale,
                      __m256i& maxBits) {
  const __m256 scale = _mm256_set1_ps(prescale), norm = _mm256_set1_ps(rotationNorm(size));
  const __m256i signBit = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff);
  // Lane l of the 8 elements at bit offset b of a word: mask = word << (31 - b - l), sign bit only. A
  // 64-element group starts a word's half of a Philox call, so register k's elements sit at bit offset
  // 8 (k mod 4) of the group's word k / 4: four fixed shift vectors.
  const __m256i laneShift = _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24);
  const __m256i shifts[4] = {laneShift, _mm256_sub_epi32(laneShift, _mm256_set1_epi32(8)),
                             _mm256_sub_epi32(laneShift, _mm256_set1_epi32(16)),
                             _mm256_sub_epi32(laneShift, _mm256_set1_epi32(24))};
  const bool single = size == 64;
  signs.cover(first, size);
  for (size_t g = 0; g < size; g += 64) {
    const uint64_t e = first + g;  // a multiple of 64: two sign words
    const __m256i words[2] = {_mm256_set1_epi32(static_cast<int>(signs.word32(e))),
                              _mm256_set1_epi32(static_cast<int>(signs.word32(e + 32)))};
    __m256 r[8];
    for (int k = 0; k < 8; ++k) {
      const __m256i negative = _mm256_and_si256(_mm256_sllv_epi32(words[k >> 2], shifts[k & 3]), signBit);
      const __m256 in = _mm256_loadu_ps(x + g + 8 * k);
      maxBits = _mm256_max_epu32(maxBits, _mm256_and_si256(_mm256_castps_si256(in), absMask));
      const __m256 v = _mm256_mul_ps(in, scale);
      r[k] = inRegisterStages8(_mm256_xor_ps(v, _mm256_castsi256_ps(negative)));
    }
    acrossRegisterStages8(r);
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(y + g + 8 * k, single ? _mm256_mul_ps(r[k], norm) : r[k]);
  }
  wideStagesAvx2(y, size, [&](__m256 v, size_t) { return _mm256_mul_ps(v, norm); });
}

// saturatingScale on 8 lanes: a finite value whose product overflows becomes +-FLT_MAX (every compared
// magnitude is below 2^31, so the signed compare is the unsigned one).
inline __m256 saturatingScale8(__m256 v, __m256 scale) {
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff), infBits = _mm256_set1_epi32(0x7f800000);
  const __m256 r = _mm256_mul_ps(v, scale);
  const __m256i vi = _mm256_castps_si256(v), ri = _mm256_castps_si256(r);
  const __m256i overflowed = _mm256_and_si256(_mm256_cmpeq_epi32(_mm256_and_si256(ri, absMask), infBits),
                                              _mm256_cmpgt_epi32(infBits, _mm256_and_si256(vi, absMask)));
  const __m256i saturated = _mm256_or_si256(_mm256_andnot_si256(absMask, vi), _mm256_set1_epi32(0x7f7fffff));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(ri, saturated, overflowed));
}

// The inverse rotation of one block of 64 or more elements on AVX2, rotateInverse's generic steps on the
// same values (FWHT stage by stage, then x norm, D's sign, x postscale saturating): 64-element groups
// through spans 1-32 in registers, the wider stages in memory (in L1), and the element-wise end folded
// into the last stage's stores. The generic path takes four passes and a scalar saturation test per
// element.
void inverseBlockAvx2(const float* y, float* x, size_t size, SignWords& signs, uint64_t first, float postscale) {
  const __m256 scale = _mm256_set1_ps(postscale), norm = _mm256_set1_ps(rotationNorm(size));
  const __m256i signBit = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i laneShift = _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24);
  // D's signs as 32-bit words, word k for elements first + 32k .. + 31 (first a multiple of 64).
  uint32_t words[8192 / 32];
  signs.cover(first, size);
  for (size_t k = 0; k < size; k += 32) words[k / 32] = signs.word32(first + k);
  // x = saturatingScale(flipped(v x norm, D), postscale) for the transform's output v at element j. A
  // postscale of 1 (2^0: every tensor below 2^100) leaves every value as it is and never overflows, so
  // the product and the saturation test are skipped there.
  auto flippedAt = [&](__m256 v, size_t j) {
    const __m256i shift = _mm256_sub_epi32(laneShift, _mm256_set1_epi32(static_cast<int>(j & 31u)));
    const __m256i negative =
        _mm256_and_si256(_mm256_sllv_epi32(_mm256_set1_epi32(static_cast<int>(words[j / 32])), shift), signBit);
    return _mm256_xor_ps(_mm256_mul_ps(v, norm), _mm256_castsi256_ps(negative));
  };
  auto run = [&](auto finish) {
    const bool single = size == 64;
    for (size_t g = 0; g < size; g += 64) {
      __m256 r[8];
      for (int k = 0; k < 8; ++k) r[k] = inRegisterStages8(_mm256_loadu_ps(y + g + 8 * k));
      acrossRegisterStages8(r);
      for (int k = 0; k < 8; ++k) {
        const size_t j = g + 8 * static_cast<size_t>(k);
        _mm256_storeu_ps(x + j, single ? finish(r[k], j) : r[k]);
      }
    }
    wideStagesAvx2(x, size, finish);
  };
  if (postscale == 1.0f) {
    run(flippedAt);
  } else {
    run([&](__m256 v, size_t j) { return saturatingScale8(flippedAt(v, j), scale); });
  }
}
#endif

}  // namespace

void rotateForward(const float* x, float* y, size_t n, size_t blockSize, const RotationKey& key, float prescale,
                   uint64_t first, uint32_t* inputMaxBits) {
  const RngStream s = rotationStream(key);
  uint32_t masks[8192];
  [[maybe_unused]] SignWords signs(s, first + n);
  uint32_t largest = 0;  // the blocks' of the generic steps
#if defined(__AVX512F__)
  __m512i vectorLargest = _mm512_setzero_si512();
#elif defined(__AVX2__)
  __m256i vectorLargest = _mm256_setzero_si256();
#endif
  forRotationBlocks(n, blockSize, [&](size_t start, size_t size) {
#if defined(__AVX512F__)
    if (size >= 16) return forwardBlock(x + start, y + start, size, signs, first + start, prescale, vectorLargest);
#elif defined(__AVX2__)
    if (size >= 64 && (first + start) % 64 == 0)
      return forwardBlockAvx2(x + start, y + start, size, signs, first + start, prescale, vectorLargest);
#endif
    if (inputMaxBits)  // before y is written: y may alias x
      for (size_t j = 0; j < size; ++j) largest = std::max(largest, absBits(x[start + j]));
    signMasks(s, first + start, size, masks);
    for (size_t j = 0; j < size; ++j) y[start + j] = flipped(x[start + j] * prescale, masks[j]);
    fwht(y + start, size);
    const float norm = rotationNorm(size);
    for (size_t j = 0; j < size; ++j) y[start + j] *= norm;
  });
  if (!inputMaxBits) return;
#if defined(__AVX512F__)
  largest = std::max(largest, static_cast<uint32_t>(_mm512_reduce_max_epu32(vectorLargest)));
#elif defined(__AVX2__)
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), vectorLargest);
  for (const uint32_t m : lanes) largest = std::max(largest, m);
#endif
  *inputMaxBits = largest;
}

void rotateInverse(const float* y, float* x, size_t n, size_t blockSize, const RotationKey& key, float postscale,
                   uint64_t first) {
  const RngStream s = rotationStream(key);
  uint32_t masks[8192];
  [[maybe_unused]] SignWords signs(s, first + n);
  forRotationBlocks(n, blockSize, [&](size_t start, size_t size) {
#if defined(__AVX512F__)
    if (size >= 16) return inverseBlock(y + start, x + start, size, signs, first + start, postscale);
#elif defined(__AVX2__)
    if (size >= 64 && (first + start) % 64 == 0)
      return inverseBlockAvx2(y + start, x + start, size, signs, first + start, postscale);
#endif
    if (x != y) std::copy(y + start, y + start + size, x + start);
    fwht(x + start, size);
    signMasks(s, first + start, size, masks);
    const float norm = rotationNorm(size);
    for (size_t j = 0; j < size; ++j) x[start + j] = saturatingScale(flipped(x[start + j] * norm, masks[j]), postscale);
  });
}

}  // namespace gradcomp::cpu
