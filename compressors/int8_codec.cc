// `int8`: symmetric per-block absmax quantization to [-127, 127] (never -128, so the grid is symmetric
// and zero is exact), scale = 127 / amax. Rounding to nearest even, or stochastic (unbiased) with
// Philox uniforms keyed by (seed, rank, step, tensor, element), of rounding_bits=16 or 8 random bits
// (compressors/stochastic_rounding.h). Layout: [scales][int8 codes].
#include "compressors/block_codec.h"
#include "compressors/stochastic_rounding.h"
#include "core/error.h"
#include "kernels/cpu/block_scale_kernels.h"
#include "kernels/cpu/rounding_fields.h"


#if GRADCOMP_HAVE_CUDA
#include "compressors/cuda_launch.h"
#include "kernels/cuda/block_scale_kernels.cuh"
#include "kernels/cuda/validate_kernels.cuh"
#endif

namespace gradcomp {
namespace {

class Int8Codec final : public BlockCodec {
 public:
  explicit Int8Codec(const CodecSpec& spec)
      : BlockCodec(spec, blockSizeParam(spec, 256), Rotation::Supported),
        stochastic_(spec.getChoice("rounding", "nearest", {"nearest", "stochastic"}) == "stochastic"),
        roundingBits_(roundingBitsParam(spec, stochastic_)) {}
  CodecId id() const override { return CodecId::Int8; }
  CompressorTraits traits() const override {
    CompressorTraits t;
    t.stochastic = stochastic_;
    return t;
  }
  double varianceBound(size_t n, uint64_t) const override {
    return symmetricRoundingVarianceBound(n, blockSize(), 127, stochastic_);
  }

 protected:
  Sections sections(const WireHeader& h) const override { return scaleAndCodeSections(h, 4, 8); }
  uint32_t formatFlags() const override { return roundingFlags(stochastic_, roundingBits_); }
  void validateFlags(uint32_t flags) const override { validateRoundingFlags(flags, name()); }
  void encodeTile(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                  const EncodeContext& ctx, uint64_t& saturated, bool streamOut) const override {
    encodeTileChecked(h, x, begin, count, payload, ctx, saturated, streamOut);
  }
  // The NaN/Inf check is each block's maximum, which the scale needs anyway: the tile is read from memory
  // once, not scanned first and encoded after.
  uint64_t encodeTileChecked(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                             const EncodeContext& ctx, uint64_t&, bool) const override {
    // The next 4 KiB tile is prefetched as this tile's uniforms are drawn, so its loads have a whole
    // tile's work to arrive in (none: 1.48x memcpy; this tile: 1.21x; the next: 5.6 against 6.3 ms for
    // this tile's, in alternating rounds, measured with the uniforms as floats and into L1; docs/notes.md).
    // With the uniforms as fields, into L2: 7.25 -> 6.82 ms per 16M values on the AVX-512 path, 6.24 ->
    // 5.40 at 8 bits, faster in every round; on AVX2 8.18 -> 8.00 and 6.75 -> 6.18 (twenty-eighth part).
    return encodeBlocks(h, x, begin, count, payload, ctx, x + count, nullptr);
  }
  // Error feedback's step with the residual written from the codes in registers, not by a decode of the
  // tile and a subtraction (the same bits: decodeInt8Block's product, then the difference). x is the
  // tile's g + e in a scratch buffer, already checked finite; nothing after it is worth prefetching.
  void encodeTileResidual(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                          const EncodeContext& ctx, uint64_t&, float* residualOut, float*) const override {
    encodeBlocks(h, x, begin, count, payload, ctx, nullptr, residualOut);
  }
  scalar::ScaleRule scaleRule(const WireHeader&) const override { return scalar::ScaleRule{.reciprocalOf = 127.0f}; }
  void validatePayload(const WireHeader& h, const std::byte* payload) const override {
    const Sections sec = sections(h);
    validateBlockScales(reinterpret_cast<const float*>(payload + sec.offset[0]), sec.bytes[0] / 4, name(), scaleRule(h));
    const size_t bad = cpu::firstInt8Minimum(reinterpret_cast<const int8_t*>(payload + sec.offset[1]), h.numElements);
    GRADCOMP_CHECK(bad == h.numElements, DecodeError, name(), ": code -128 at element ", bad,
                   " is outside the symmetric range [-127, 127]");
  }
  // The overwrite decode checks each tile's scales and codes in its own pass (validatePayload's checks):
  // a separate validation pass read the 16 MiB of codes of 16M values once more.
  bool validatesPerTile() const override { return true; }
  uint64_t decodeTileValidated(const WireHeader& h, const std::byte* payload, uint64_t begin, uint64_t count,
                               float* out) const override {
    const Sections sec = sections(h);
    const size_t bad = cpu::decodeInt8BlocksChecked(reinterpret_cast<const int8_t*>(payload + sec.offset[1]) + begin,
                                                    count, h.blockSize,
                                                    reinterpret_cast<const float*>(payload + sec.offset[0]) + begin / h.blockSize,
                                                    scaleRule(h), out, streamsDecode(h));
    return bad != count ? bad : EncodeResult::kNoIndex;
  }
  void decodeTile(const WireHeader& h, const std::byte* payload, uint64_t begin, uint64_t count, float* out,
                  bool accumulate) const override {
    const Sections sec = sections(h);
    const auto* scales = reinterpret_cast<const float*>(payload + sec.offset[0]);
    const auto* codes = reinterpret_cast<const int8_t*>(payload + sec.offset[1]) + begin;
    forBlocksInTile(begin, count, h.blockSize, [&](uint64_t block, uint64_t off, uint64_t len) {
      cpu::decodeInt8Block(codes + off, len, scales[block], out + off, accumulate);
    });
  }
#if GRADCOMP_HAVE_CUDA
  void launchEncodeOnDevice(const DeviceEncode& d) const override {
    cudapath::check(cuda::launchEncodeInt8Blocks(d.grad, d.residualIn, d.n, d.h.blockSize,
                                                 (d.h.flags & kStochasticRoundingFlag) != 0,
                                                 d.rng.withRoundingBits(roundingBitsOfFlags(d.h.flags)), 0,
                                                 reinterpret_cast<int8_t*>(d.section(1)),
                                                 reinterpret_cast<float*>(d.section(0)), d.residualOut, d.firstBad,
                                                 cudapath::asStream(d.stream)), "int8 encode");
  }
  void launchCheckOnDevice(const DeviceCheck& d) const override {
    const cudaStream_t stream = cudapath::asStream(d.stream);
    cudapath::check(cuda::launchFindBadScales(reinterpret_cast<const float*>(d.section(0)), d.blocks(), d.scaleRule,
                                              d.firstBad, stream), "int8 scale check");
    cudapath::check(cuda::launchFindInt8Minimum(reinterpret_cast<const int8_t*>(d.section(1)), d.h.numElements,
                                                d.firstBad, stream), "int8 code check");
  }
  void launchDecodeOnDevice(const DeviceDecode& d) const override {
    cudapath::check(cuda::launchDecodeInt8Blocks(reinterpret_cast<const int8_t*>(d.section(1)), d.h.numElements,
                                                 d.h.blockSize, reinterpret_cast<const float*>(d.section(0)), d.out,
                                                 d.accumulate, cudapath::asStream(d.stream)), "int8 decode");
  }
#endif

 private:
  // The tile's blocks: scales and codes into the payload (residual too when given); returns the first
  // NaN/Inf's index in the tile, or kNoIndex.
  uint64_t encodeBlocks(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                        const EncodeContext& ctx, const float* readAhead, float* residual) const {
    const Sections sec = sections(h);
    auto* scales = reinterpret_cast<float*>(payload + sec.offset[0]);
    auto* codes = reinterpret_cast<int8_t*>(payload + sec.offset[1]) + begin;
    // The uniforms stay Philox fields until the codes widen them in registers, as qsgd's
    // (rounding_fields.h); nearest rounding draws none (an empty view). The read-ahead goes into L2
    // (encodeTileChecked says why).
    const cpu::RoundingFields u =
        stochastic_ ? tileRoundingFields(ctx, h.flags, begin, count, readAhead, cpu::PrefetchInto::L2)
                    : cpu::RoundingFields{};
    const uint64_t bad = cpu::encodeInt8Blocks(x, count, h.blockSize, u, scales + begin / h.blockSize, codes, residual);
    if (bad == count) return EncodeResult::kNoIndex;
    return bad + firstNonFinite(std::span<const float>(x + bad, std::min<uint64_t>(h.blockSize, count - bad)));
  }

  bool stochastic_;
  uint32_t roundingBits_;  // per stochastic-rounding uniform (compressors/stochastic_rounding.h)
};

}  // namespace

std::unique_ptr<Compressor> makeInt8Codec(const CodecSpec& spec) { return std::make_unique<Int8Codec>(spec); }

}  // namespace gradcomp
