#include "kernels/cpu/microscaling_kernels.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/bit_pack.h"
#include "kernels/cpu/block_scale_kernels.h"
#include "kernels/cpu/block_scale_kernels_avx512.h"
#include "kernels/cpu/cpu_path.h"
#include "kernels/cpu/microscaling_kernels_avx2.h"
#include "kernels/cpu/microscaling_kernels_avx512.h"

namespace gradcomp::cpu {

using namespace scalar;

float absMax(const float* x, size_t n) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (activeCpuPath() == CpuPath::Avx512) return bitsToFloat(avx512::maxAbsBits(x, n));
#endif
  return blockAmax(x, n);
}

float absMaxOfSum(const float* g, const float* e, size_t n) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (activeCpuPath() == CpuPath::Avx512) return bitsToFloat(avx512::maxAbsBitsOfSum(g, e, n));
#endif
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, absBits(g[i] + e[i]));
  return bitsToFloat(m);
}

namespace {

// floatToElement without branches, so the block loops vectorize (tested equal to it: the golden
// hashes, and tests/python/test_element_formats.py against ml_dtypes through these kernels).
struct ElementLane {
  explicit ElementLane(const ElementSpec& spec)
      : s(spec),
        maxBits(floatBits(spec.maxValue)),
        shift(23 - spec.mantBits),
        rebias((static_cast<uint32_t>(spec.bias - 127) << 23) + ((1u << (22 - spec.mantBits)) - 1u)),
        magicBits(floatBits(spec.subnormalMagic)),
        overflow(elementOverflowBits(spec)) {}
  uint8_t operator()(float v) const {
    const uint32_t xb = floatBits(v);
    const uint32_t sign = (xb >> 31) << (s.bits - 1);
    const uint32_t a = xb & 0x7fffffffu;
    const uint32_t sub = floatBits(bitsToFloat(a) + s.subnormalMagic) - magicBits;
    const uint32_t nor = (a + rebias + ((a >> shift) & 1u)) >> shift;  // wraps for a < min normal: not selected
    uint32_t code = a < s.minNormalBits ? sub : nor;
    code = a >= maxBits ? s.maxCode : code;
    code = code > s.maxCode ? s.maxCode : code;
    return static_cast<uint8_t>(sign | code);
  }
  ElementSpec s;
  uint32_t maxBits;
  int shift;
  uint32_t rebias, magicBits, overflow;
};

// Every code's value of a format (256 entries cover the widest).
struct ElementTable {
  explicit ElementTable(ElementFormat fmt) {
    const ElementSpec s = elementSpec(fmt);
    for (int c = 0; c < 256; ++c) value[c] = elementToFloat(static_cast<uint8_t>(c & ((1 << s.bits) - 1)), s, fmt);
  }
  float value[256];
};

const ElementTable& tableOf(ElementFormat fmt) {
  static const ElementTable tables[] = {ElementTable(ElementFormat::E4M3), ElementTable(ElementFormat::E5M2),
                                        ElementTable(ElementFormat::E2M3), ElementTable(ElementFormat::E3M2),
                                        ElementTable(ElementFormat::E2M1)};
  return tables[static_cast<int>(fmt)];
}

// out[i] (=|+=) fl(value[codes[i]] x factor): the decoders' one product per element.
void decodeScaled(const uint8_t* codes, size_t n, const float* value, float factor, float* out, bool accumulate) {
  if (accumulate) {
    for (size_t i = 0; i < n; ++i) out[i] += value[codes[i]] * factor;
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = value[codes[i]] * factor;
  }
}

// Codes of one block: codes[i] = lane(x[i] op factor), returning the saturations. kLen > 0: the block's
// length known at compile time (the formats' standard 16 and 32), so the loop is one straight vector
// sequence instead of a runtime-length loop that the vectorizer versions and, at 16-32 elements,
// leaves to its scalar tail.
// The lane is copied to a local first: a store through uint8_t* may alias any object as far as the
// compiler knows (restrict or not, GCC 12 reloaded every field of the referenced lane after each code
// and left the loop scalar: mxfp8 encode 4.8x memcpy on an AVX2 CPU).
template <int kLen, bool kDivide>
uint32_t blockCodes(const float* __restrict x, size_t len, float factor, const ElementLane& lane,
                    uint8_t* __restrict codes) {
  const size_t n = kLen > 0 ? static_cast<size_t>(kLen) : len;
  const ElementLane local = lane;
  uint32_t sat = 0;
  for (size_t i = 0; i < n; ++i) {
    const float v = kDivide ? x[i] / factor : x[i] * factor;
    sat += absBits(v) >= local.overflow;
    codes[i] = local(v);
  }
  return sat;
}

template <bool kDivide>
uint32_t blockCodesAnyLength(const float* x, size_t len, float factor, const ElementLane& lane, uint8_t* codes) {
  if (len == 32) return blockCodes<32, kDivide>(x, len, factor, lane, codes);
  if (len == 16) return blockCodes<16, kDivide>(x, len, factor, lane, codes);
  return blockCodes<0, kDivide>(x, len, factor, lane, codes);
}

}  // namespace

// The first NaN/Inf of a block whose maximum magnitude bits reached Inf's.
static bool nonFiniteIn(const float* x, size_t b0, size_t len, float amax, uint64_t* firstBad) {
  if (isFiniteBits(floatBits(amax))) return false;
  if (firstBad) *firstBad = b0 + firstNonFiniteIndex(x + b0, len);
  return true;
}

uint64_t encodeMxBlocks(const float* x, size_t n, size_t blockSize, ElementFormat fmt, uint8_t* codes,
                        uint8_t* scaleCodes, uint64_t* firstBad) {
  const ElementLane lane(elementSpec(fmt));
  uint64_t saturated = 0;
  for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) {
    const size_t len = std::min(blockSize, n - b0);
    const float amax = blockAmax(x + b0, len);
    if (nonFiniteIn(x, b0, len, amax, firstBad)) return saturated;
    const uint8_t scaleCode = mxSharedScaleCode(amax, lane.s);
    scaleCodes[block] = scaleCode;
    // x / 2^e as a product with 2^-e: exact (a power of two, and x / X < 2^(emax + 1) never overflows).
    saturated += blockCodesAnyLength<false>(x + b0, len, mxInverseScale(scaleCode), lane, codes + b0);
  }
  return saturated;
}

void decodeMxBlock(const uint8_t* codes, size_t n, ElementFormat fmt, uint8_t scaleCode, float* out, bool accumulate) {
  decodeScaled(codes, n, tableOf(fmt).value, e8m0ToFloat(scaleCode), out, accumulate);
}

uint64_t encodeNvfp4Blocks(const float* x, size_t n, size_t blockSize, float t, uint8_t* codes, uint8_t* scaleCodes,
                           uint64_t* firstBad) {
  const ElementLane lane(elementSpec(ElementFormat::E2M1));
  uint64_t saturated = 0;
  for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) {
    const size_t len = std::min(blockSize, n - b0);
    const float amax = blockAmax(x + b0, len);
    if (nonFiniteIn(x, b0, len, amax, firstBad)) return saturated;
    const uint8_t scaleCode = nvfp4BlockScaleCode(amax, t);
    scaleCodes[block] = scaleCode;
    const float factor = nvfp4BlockFactor(scaleCode, t);
    if (factor == 0.0f) {  // the block is below E4M3's smallest scale: every value decodes to 0
      std::fill(codes + b0, codes + b0 + len, uint8_t{0});
    } else {
      // Divided, not multiplied by a reciprocal: the definition's rounding.
      saturated += blockCodesAnyLength<true>(x + b0, len, factor, lane, codes + b0);
    }
  }
  return saturated;
}

namespace {

// The packed entry points off the AVX-512 path: byte codes into a per-thread buffer, then packed.
template <typename Encode>
uint64_t encodeThenPack(size_t n, int bits, uint8_t* packed, Encode&& encode) {
  if (bits == 8) return encode(packed);
  thread_local std::vector<uint8_t> codes;
  if (codes.size() < n) codes.resize(n);
  const uint64_t saturated = encode(codes.data());
  packBits(codes.data(), n, bits, packed);
  return saturated;
}

}  // namespace

#if GRADCOMP_CPU_AVX2_MICROSCALING
// Runs an AVX2 encoder over the whole blocks, then `rest(x, n, packed, scaleCodes, firstBad)` (the portable
// path) over a short last block: it starts a block, so a byte, and its firstBad is shifted back to x's
// indices.
template <typename Rest>
uint64_t afterAvx2Blocks(const avx2::BlocksEncoded& whole, const float* x, size_t n, size_t blockSize, int bits,
                         uint8_t* packed, uint8_t* scaleCodes, uint64_t* firstBad, Rest&& rest) {
  if (whole.done == n) return whole.saturated;
  const size_t d = whole.done;
  uint64_t bad = ~uint64_t{0};
  const uint64_t saturated = rest(x + d, n - d, packed + d * static_cast<size_t>(bits) / 8, scaleCodes + d / blockSize,
                                  firstBad ? &bad : nullptr);
  if (firstBad && bad != ~uint64_t{0}) *firstBad = d + bad;
  return whole.saturated + saturated;
}
#endif

uint64_t encodeMxBlocksPacked(const float* x, size_t n, size_t blockSize, ElementFormat fmt, uint8_t* packed,
                              uint8_t* scaleCodes, uint64_t* firstBad) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (blockSize % 16 == 0 && activeCpuPath() == CpuPath::Avx512)
    return avx512::encodeMxBlocksPacked(x, n, blockSize, fmt, packed, scaleCodes, firstBad);
#endif
  const int bits = elementSpec(fmt).bits;
  auto portable = [&](const float* xs, size_t ns, uint8_t* out, uint8_t* scales, uint64_t* bad) {
    return encodeThenPack(ns, bits, out, [&](uint8_t* codes) { return encodeMxBlocks(xs, ns, blockSize, fmt, codes, scales, bad); });
  };
#if GRADCOMP_CPU_AVX2_MICROSCALING
  if (blockSize % 8 == 0 && activeCpuPath() >= CpuPath::Avx2)
    return afterAvx2Blocks(avx2::encodeMxBlocksPacked(x, n, blockSize, fmt, packed, scaleCodes, firstBad), x, n,
                           blockSize, bits, packed, scaleCodes, firstBad, portable);
#endif
  return portable(x, n, packed, scaleCodes, firstBad);
}

bool nvfp4EncodeUsesBlockMaxima(size_t blockSize) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (blockSize == 16 && activeCpuPath() == CpuPath::Avx512) return true;
#endif
#if GRADCOMP_CPU_AVX2_MICROSCALING
  return blockSize == 16 && activeCpuPath() >= CpuPath::Avx2;
#else
  (void)blockSize;
  return false;
#endif
}

uint32_t nvfp4BlockMaxBits(const float* x, size_t n, size_t blockSize, uint32_t* maxBits) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (blockSize == 16 && activeCpuPath() == CpuPath::Avx512) return avx512::nvfp4BlockMaxBits(x, n, maxBits);
#endif
#if GRADCOMP_CPU_AVX2_MICROSCALING
  if (blockSize == 16 && activeCpuPath() >= CpuPath::Avx2) return avx2::nvfp4BlockMaxBits(x, n, maxBits);
#endif
  uint32_t largest = 0;
  for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) {
    uint32_t m = 0;
    for (size_t i = b0; i < std::min(n, b0 + blockSize); ++i) m = std::max(m, absBits(x[i]));
    maxBits[block] = m;
    largest = std::max(largest, m);
  }
  return largest;
}

uint64_t encodeNvfp4BlocksPacked(const float* x, size_t n, size_t blockSize, float t, uint8_t* packed,
                                 uint8_t* scaleCodes, uint64_t* firstBad, const uint32_t* blockMaxBits) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (blockSize % 16 == 0 && activeCpuPath() == CpuPath::Avx512)
    return avx512::encodeNvfp4BlocksPacked(x, n, blockSize, t, packed, scaleCodes, firstBad, nullptr,
                                           blockSize == 16 ? blockMaxBits : nullptr);
#endif
  auto portable = [&](const float* xs, size_t ns, uint8_t* out, uint8_t* scales, uint64_t* bad) {
    return encodeThenPack(ns, 4, out, [&](uint8_t* codes) { return encodeNvfp4Blocks(xs, ns, blockSize, t, codes, scales, bad); });
  };
#if GRADCOMP_CPU_AVX2_MICROSCALING
  if (blockSize % 8 == 0 && activeCpuPath() >= CpuPath::Avx2)
    return afterAvx2Blocks(avx2::encodeNvfp4BlocksPacked(x, n, blockSize, t, packed, scaleCodes, firstBad,
                                                         blockSize == 16 ? blockMaxBits : nullptr),
                           x, n, blockSize, 4, packed, scaleCodes, firstBad, portable);
#else
  (void)blockMaxBits;
#endif
  return portable(x, n, packed, scaleCodes, firstBad);
}

namespace {

// Off AVX-512: the encode, the decode into residual, the difference.
template <typename Encode, typename Decode>
uint64_t encodeThenSubtractDecoded(const float* x, size_t n, float* residual, Encode&& encode, Decode&& decode) {
  const uint64_t saturated = encode();
  decode(residual);
  for (size_t i = 0; i < n; ++i) residual[i] = x[i] - residual[i];
  return saturated;
}

}  // namespace

uint64_t encodeMxBlocksPackedWithResidual(const float* x, size_t n, size_t blockSize, ElementFormat fmt,
                                          uint8_t* packed, uint8_t* scaleCodes, float* residual) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (blockSize % 16 == 0 && activeCpuPath() == CpuPath::Avx512)
    return avx512::encodeMxBlocksPacked(x, n, blockSize, fmt, packed, scaleCodes, nullptr, residual);
#endif
  return encodeThenSubtractDecoded(
      x, n, residual, [&] { return encodeMxBlocksPacked(x, n, blockSize, fmt, packed, scaleCodes); },
      [&](float* out) { decodeMxBlocksPacked(packed, n, blockSize, fmt, scaleCodes, out, false); });
}

uint64_t encodeNvfp4BlocksPackedWithResidual(const float* x, size_t n, size_t blockSize, float t, uint8_t* packed,
                                             uint8_t* scaleCodes, float* residual) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (blockSize % 16 == 0 && activeCpuPath() == CpuPath::Avx512)
    return avx512::encodeNvfp4BlocksPacked(x, n, blockSize, t, packed, scaleCodes, nullptr, residual);
#endif
  return encodeThenSubtractDecoded(
      x, n, residual, [&] { return encodeNvfp4BlocksPacked(x, n, blockSize, t, packed, scaleCodes); },
      [&](float* out) { decodeNvfp4BlocksPacked(packed, n, blockSize, scaleCodes, t, out, false); });
}

namespace {

// The packed decoders off the vector paths: the codes unpacked into a per-thread buffer, then per block.
template <typename DecodeBlock>
void unpackThenDecode(const uint8_t* packed, size_t n, size_t blockSize, int bits, DecodeBlock&& decodeBlock) {
  thread_local std::vector<uint8_t> codes;
  if (codes.size() < n) codes.resize(n);
  const uint8_t* c = packed;
  if (bits != 8) {
    unpackBits(packed, n, bits, codes.data());
    c = codes.data();
  }
  for (size_t b0 = 0, block = 0; b0 < n; b0 += blockSize, ++block) decodeBlock(c + b0, std::min(blockSize, n - b0), block, b0);
}

}  // namespace

void decodeMxBlocksPacked(const uint8_t* packed, size_t n, size_t blockSize, ElementFormat fmt,
                          const uint8_t* scaleCodes, float* out, bool accumulate) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (blockSize % 16 == 0 && activeCpuPath() == CpuPath::Avx512)
    return avx512::decodeMxBlocksPacked(packed, n, blockSize, fmt, scaleCodes, out, accumulate);
#endif
  const int bits = elementSpec(fmt).bits;
  size_t done = 0;
#if GRADCOMP_CPU_AVX2_MICROSCALING
  if (blockSize % 8 == 0 && activeCpuPath() >= CpuPath::Avx2) {
    done = avx2::decodeMxBlocksPacked(packed, n, blockSize, fmt, scaleCodes, out, accumulate);
    if (done == n) return;
  }
#endif
  // The rest (all of it, or a short last block after the AVX2 blocks: it starts on a byte).
  const uint8_t* scales = scaleCodes + done / blockSize;
  unpackThenDecode(packed + done * static_cast<size_t>(bits) / 8, n - done, blockSize, bits,
                   [&](const uint8_t* c, size_t len, size_t block, size_t b0) {
                     decodeMxBlock(c, len, fmt, scales[block], out + done + b0, accumulate);
                   });
}

void decodeNvfp4BlocksPacked(const uint8_t* packed, size_t n, size_t blockSize, const uint8_t* scaleCodes, float t,
                             float* out, bool accumulate) {
#if GRADCOMP_CPU_AVX512_KERNELS
  if (blockSize % 16 == 0 && activeCpuPath() == CpuPath::Avx512)
    return avx512::decodeNvfp4BlocksPacked(packed, n, blockSize, scaleCodes, t, out, accumulate);
#endif
  size_t done = 0;
#if GRADCOMP_CPU_AVX2_MICROSCALING
  if (blockSize % 8 == 0 && activeCpuPath() >= CpuPath::Avx2) {
    done = avx2::decodeNvfp4BlocksPacked(packed, n, blockSize, scaleCodes, t, out, accumulate);
    if (done == n) return;
  }
#endif
  const uint8_t* scales = scaleCodes + done / blockSize;
  unpackThenDecode(packed + done / 2, n - done, blockSize, 4, [&](const uint8_t* c, size_t len, size_t block, size_t b0) {
    decodeNvfp4Block(c, len, scales[block], t, out + done + b0, accumulate);
  });
}

void decodeNvfp4Block(const uint8_t* codes, size_t n, uint8_t scaleCode, float t, float* out, bool accumulate) {
  decodeScaled(codes, n, tableOf(ElementFormat::E2M1).value, nvfp4BlockFactor(scaleCode, t), out, accumulate);
}

}  // namespace gradcomp::cpu
