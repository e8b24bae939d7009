// The stochastic level codecs: `qsgd` and `terngrad` (kernels in kernels/cpu/level_kernels.h).
// `qsgd`: QSGD (Alistarh et al. 2017). Per bucket (block) the L2 norm; each element becomes
// sign x level / s x norm with level stochastically rounded, s = 2^(bits-1) - 1 (bits 2..8), so the
// codec is unbiased. Layout: [fp32 norm per bucket][bits per element, LSB-first].
#include <algorithm>
#include <cmath>
#include <vector>

#include "compressors/block_codec.h"
#include "compressors/stochastic_rounding.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "kernels/cpu/bit_pack.h"
#include "kernels/cpu/block_scale_kernels.h"
#include "kernels/cpu/cpu_path.h"
#include "kernels/cpu/level_kernels.h"
#include "kernels/cpu/rounding_fields.h"
#include "kernels/scalar/level_codes.h"
#if GRADCOMP_HAVE_CUDA
#include "compressors/level_codes_on_device.h"
#include "kernels/cuda/validate_kernels.cuh"
#endif

namespace gradcomp {
namespace {

// Runs encodeBlock(block, offset, length, &nonFinite) over the tile's blocks until one reports a NaN/Inf;
// returns that block's first non-finite element (index in the tile), or kNoIndex.
template <typename EncodeBlock>
uint64_t encodeBlocksChecked(uint64_t begin, uint64_t count, uint32_t blockSize, const float* x, EncodeBlock&& encodeBlock) {
  for (uint64_t off = 0; off < count; off += blockSize) {
    const uint64_t len = std::min<uint64_t>(blockSize, count - off);
    bool nonFinite = false;
    encodeBlock((begin + off) / blockSize, off, len, &nonFinite);
    if (nonFinite) return off + firstNonFinite(std::span<const float>(x + off, len));
  }
  return EncodeResult::kNoIndex;
}

class QsgdCodec final : public BlockCodec {
 public:
  explicit QsgdCodec(const CodecSpec& spec)
      : BlockCodec(spec, blockSizeParam(spec, 512), Rotation::Supported),
        bits_(static_cast<int>(spec.getUInt("bits", 4, 2, 8))),
        roundingBits_(roundingBitsParam(spec, true)) {}
  CodecId id() const override { return CodecId::Qsgd; }
  CompressorTraits traits() const override {
    CompressorTraits t;
    t.stochastic = true;
    return t;
  }
  // Per block of d values at s levels (Alistarh et al. 2017, Lemma 3.1, with its first term made exact):
  // a value rounds between two levels norm / s apart with variance (norm / s)^2 p (1 - p), at most
  // (norm / s)^2 / 4, so d / (4 s^2) over the block; and at most (norm / s) |x_i|, so sqrt(d) / s.
  double varianceBound(size_t n, uint64_t) const override {
    const double d = static_cast<double>(std::min<size_t>(n, blockSize()));
    const double s = scalar::qsgdLevels(bits_);
    return std::min(d / (4 * s * s), std::sqrt(d) / s);
  }

 protected:
  Sections sections(const WireHeader& h) const override { return scaleAndCodeSections(h, 4, codeBits(h)); }
  // The low byte: bits per element; bit 8: 8-bit rounding uniforms.
  uint32_t formatFlags() const override { return static_cast<uint32_t>(bits_) | roundingBitsFlag(roundingBits_); }
  void validateFlags(uint32_t flags) const override {
    validateKnownFlags(flags, kCodeBitsMask | kEightBitUniformsFlag, name());
    const uint32_t bits = flags & kCodeBitsMask;
    GRADCOMP_CHECK(bits >= 2 && bits <= 8, DecodeError, name(), ": bits per element ", bits, " is outside [2, 8]");
  }
  void encodeTile(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                  const EncodeContext& ctx, uint64_t& saturated, bool streamOut) const override {
    encodeTileChecked(h, x, begin, count, payload, ctx, saturated, streamOut);
  }
  // Tiles of 4096 values (8 of the default 512-value blocks), the next one prefetched into L2 as this one's
  // uniforms are drawn (below). The AVX2 path draws them at half the AVX-512 speed, and there (and on the
  // scalar path, not measured) tiles of 2048 prefetched into L1 keep its reads closer to its arithmetic:
  // 10.6 -> 10.0 ms per 16M values, faster in 9 of 10 alternated rounds, where the AVX-512 path went
  // 8.7 -> 9.9 ms with them (docs/notes.md, twenty-fifth part). Only where the input is read changes; the
  // bytes do not depend on the tiles.
  // (Keyed on the kernels' run-time path: on a build for the machine, the path Philox's compile-time width
  // follows too.)
  static bool onAvx512Path() { return cpu::activeCpuPath() == cpu::CpuPath::Avx512; }
  uint64_t tileMultiple() const override { return onAvx512Path() ? 4 : 2; }
  // The NaN/Inf scan is the blocks' sums of squares: one pass over the tile, not two.
  uint64_t encodeTileChecked(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                             const EncodeContext& ctx, uint64_t&, bool) const override {
    const Sections sec = sections(h);
    auto* norms = reinterpret_cast<float*>(payload + sec.offset[0]);
    // The uniforms stay Philox fields until the codes widen them in registers (rounding_fields.h: on the
    // AVX2 path 8.90 -> 8.26 ms per 16M values, docs/notes.md, twenty-seventh part). The next tile is
    // prefetched as they are drawn. A tile of 4096 into L2: its 16 KiB, this tile's 16 KiB and the
    // uniforms would overfill a 32 KiB L1 (measured with the uniforms as floats, 16 KiB; as fields they
    // are 8 KiB, still over: this tile into L1: 1.47-1.57x memcpy, into L2: 1.30-1.36x, none: 1.70x; the
    // next tile instead of this one: docs/notes.md). The AVX2 path's tiles of 2048 into L1 (tileMultiple).
    const cpu::PrefetchInto into = onAvx512Path() ? cpu::PrefetchInto::L2 : cpu::PrefetchInto::L1;
    const cpu::RoundingFields u = tileRoundingFields(ctx, h.flags, begin, count, x + count, into);
    // The sums of squares (in double: finite for every finite fp32 block) are the NaN/Inf check.
    thread_local std::vector<double> sums;
    sums.resize(ceilDiv(count, uint64_t{h.blockSize}));
    cpu::blockSumSquaresEach(x, count, h.blockSize, sums.data());
    const int levels = scalar::qsgdLevels(bits_);
    const uint64_t bad = encodeBlocksChecked(begin, count, h.blockSize, x, [&](uint64_t block, uint64_t off, uint64_t, bool* nonFinite) {
      const double sum = sums[off / h.blockSize];
      if (!std::isfinite(sum)) {
        *nonFinite = true;
        return;
      }
      norms[block] = scalar::qsgdWireNorm(sum, levels);
    });
    if (bad == EncodeResult::kNoIndex)
      cpu::encodeQsgdTilePacked(x, count, h.blockSize, bits_, norms + begin / h.blockSize, u,
                                reinterpret_cast<uint8_t*>(payload + sec.offset[1]) + begin * bits_ / 8);
    return bad;
  }
  scalar::ScaleRule scaleRule(const WireHeader& h) const override {
    return {.allowZero = true, .qsgdLevels = scalar::qsgdLevels(codeBits(h))};
  }
  void validatePayload(const WireHeader& h, const std::byte* payload) const override {
    // Every code pattern is a valid level; only the norms can be wrong.
    const Sections sec = sections(h);
    validateBlockScales(reinterpret_cast<const float*>(payload + sec.offset[0]), sec.bytes[0] / 4, name(), scaleRule(h));
  }
  void decodeTile(const WireHeader& h, const std::byte* payload, uint64_t begin, uint64_t count, float* out,
                  bool accumulate) const override {
    const Sections sec = sections(h);
    const int bits = codeBits(h);
    const auto* norms = reinterpret_cast<const float*>(payload + sec.offset[0]);
    uint8_t* codes = scratchCodes(count);
    cpu::unpackBits(reinterpret_cast<const uint8_t*>(payload + sec.offset[1]) + begin * bits / 8, count, bits, codes);
    forBlocksInTile(begin, count, h.blockSize, [&](uint64_t block, uint64_t off, uint64_t len) {
      cpu::decodeQsgdBlock(codes + off, len, bits, norms[block], out + off, accumulate);
    });
  }
#if GRADCOMP_HAVE_CUDA
  void launchEncodeOnDevice(const DeviceEncode& d) const override {
    cudapath::encodeLevelCodes(cuda::LevelCodec::Qsgd, codeBits(d.h), d);
  }
  void launchCheckOnDevice(const DeviceCheck& d) const override {  // every code is a level: only the norms
    cudapath::check(cuda::launchFindBadScales(reinterpret_cast<const float*>(d.section(0)), d.blocks(), d.scaleRule,
                                              d.firstBad, cudapath::asStream(d.stream)), "qsgd norm check");
  }
  void launchDecodeOnDevice(const DeviceDecode& d) const override {
    cudapath::decodeLevelCodes(cuda::LevelCodec::Qsgd, codeBits(d.h), d);
  }
#endif

 private:
  static constexpr uint32_t kCodeBitsMask = 0xffu;
  static int codeBits(const WireHeader& h) { return static_cast<int>(h.flags & kCodeBitsMask); }

  int bits_;
  uint32_t roundingBits_;  // per stochastic-rounding uniform (compressors/stochastic_rounding.h)
};

// `terngrad`: TernGrad (Wen et al. 2017). Per block the max |x|; each element is 0 or sign(x) x max,
// nonzero with probability |x| / max (unbiased). 2 bits per element; code 3 is invalid on the wire.
class TernGradCodec final : public BlockCodec {
 public:
  explicit TernGradCodec(const CodecSpec& spec)
      : BlockCodec(spec, blockSizeParam(spec, 512)), roundingBits_(roundingBitsParam(spec, true)) {}
  CodecId id() const override { return CodecId::TernGrad; }
  CompressorTraits traits() const override {
    CompressorTraits t;
    t.stochastic = true;
    return t;
  }
  // Per block of d values, E||C(x)||^2 = max|x| ||x||_1, at most (sqrt(d) + 1) / 2 ||x||^2 (reached by one
  // value m and the others m / (sqrt(d) + 1)): omega = (sqrt(d) - 1) / 2.
  double varianceBound(size_t n, uint64_t) const override {
    const double d = static_cast<double>(std::min<size_t>(n, blockSize()));
    return d > 1 ? (std::sqrt(d) - 1.0) / 2.0 : 0.0;
  }

 protected:
  Sections sections(const WireHeader& h) const override { return scaleAndCodeSections(h, 4, 2); }
  uint32_t formatFlags() const override { return roundingBitsFlag(roundingBits_); }  // bit 8: 8-bit uniforms
  void validateFlags(uint32_t flags) const override {
    validateKnownFlags(flags, kEightBitUniformsFlag, name());
  }
  void encodeTile(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                  const EncodeContext& ctx, uint64_t& saturated, bool streamOut) const override {
    encodeTileChecked(h, x, begin, count, payload, ctx, saturated, streamOut);
  }
  // The NaN/Inf scan is the block maximum's: one pass over the tile, not two.
  uint64_t encodeTileChecked(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                             const EncodeContext& ctx, uint64_t&, bool) const override {
    const Sections sec = sections(h);
    auto* maxima = reinterpret_cast<float*>(payload + sec.offset[0]);
    // The uniforms stay Philox fields until the codes widen them in registers, as qsgd's. The next tile is
    // prefetched as they are drawn (1.37x memcpy without, 1.16x with this tile's; the next tile's:
    // docs/notes.md), into L2: into L1 it took 8.33 against 7.56 ms per 16M values on the AVX2 path and
    // 6.59 against 6.14 on AVX-512, slower in every alternated round (docs/notes.md, twenty-eighth part;
    // qsgd's tiles of 2048 on AVX2 went the other way, 8.53 against 9.72, and stay in L1).
    const cpu::RoundingFields u = tileRoundingFields(ctx, h.flags, begin, count, x + count, cpu::PrefetchInto::L2);
    const size_t bad = cpu::encodeTernTilePacked(x, count, h.blockSize, u, maxima + begin / h.blockSize,
                                                 reinterpret_cast<uint8_t*>(payload + sec.offset[1]) + begin / 4);
    return bad == count ? EncodeResult::kNoIndex : bad;
  }
  scalar::ScaleRule scaleRule(const WireHeader&) const override { return {.allowZero = true}; }
  void validatePayload(const WireHeader& h, const std::byte* payload) const override {
    const Sections sec = sections(h);
    validateBlockScales(reinterpret_cast<const float*>(payload + sec.offset[0]), sec.bytes[0] / 4, name(), scaleRule(h));
    const auto* packed = reinterpret_cast<const uint8_t*>(payload + sec.offset[1]);
    // A 2-bit field equal to 3 has both its bits set. Each 4 KiB of codes is first OR-reduced (a loop
    // without an exit, which vectorizes: a byte-by-byte search took as long as the decode itself);
    // only a span that holds one is searched byte by byte.
    constexpr uint64_t kSpan = 4096;
    for (uint64_t start = 0; start < sec.bytes[1]; start += kSpan) {
      const uint64_t end = std::min(sec.bytes[1], start + kSpan);
      uint32_t any = 0;
      for (uint64_t byte = start; byte < end; ++byte) any |= packed[byte] & (packed[byte] >> 1) & 0x55u;
      if (!any) continue;
      for (uint64_t byte = start; byte < end; ++byte) {
        const uint32_t both = packed[byte] & (packed[byte] >> 1) & 0x55u;
        if (!both) continue;
        const uint64_t element = byte * 4 + static_cast<uint64_t>(__builtin_ctz(both)) / 2;
        GRADCOMP_CHECK(element >= h.numElements, DecodeError, name(), ": invalid ternary code 3 at element ", element);
      }
    }
  }
  void decodeTile(const WireHeader& h, const std::byte* payload, uint64_t begin, uint64_t count, float* out,
                  bool accumulate) const override {
    const Sections sec = sections(h);
    const auto* maxima = reinterpret_cast<const float*>(payload + sec.offset[0]);
    cpu::decodeTernTilePacked(reinterpret_cast<const uint8_t*>(payload + sec.offset[1]) + begin / 4, count,
                              h.blockSize, maxima + begin / h.blockSize, out, accumulate);
  }
#if GRADCOMP_HAVE_CUDA
  void launchEncodeOnDevice(const DeviceEncode& d) const override {
    cudapath::encodeLevelCodes(cuda::LevelCodec::TernGrad, 2, d);
  }
  void launchCheckOnDevice(const DeviceCheck& d) const override {
    const cudaStream_t stream = cudapath::asStream(d.stream);
    cudapath::check(cuda::launchFindBadScales(reinterpret_cast<const float*>(d.section(0)), d.blocks(), d.scaleRule,
                                              d.firstBad, stream), "terngrad maximum check");
    cudapath::check(cuda::launchFindTernaryCode3(reinterpret_cast<const uint8_t*>(d.section(1)), d.h.numElements,
                                                 d.firstBad, stream), "terngrad code check");
  }
  void launchDecodeOnDevice(const DeviceDecode& d) const override {
    cudapath::decodeLevelCodes(cuda::LevelCodec::TernGrad, 2, d);
  }
#endif

 private:
  uint32_t roundingBits_;  // per stochastic-rounding uniform (compressors/stochastic_rounding.h)
};

}  // namespace

std::unique_ptr<Compressor> makeQsgdCodec(const CodecSpec& spec) { return std::make_unique<QsgdCodec>(spec); }
std::unique_ptr<Compressor> makeTernGradCodec(const CodecSpec& spec) { return std::make_unique<TernGradCodec>(spec); }

}  // namespace gradcomp
