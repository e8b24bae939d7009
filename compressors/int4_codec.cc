// `int4`: symmetric per-block absmax quantization to [-7, 7] (never -8, so the grid is symmetric and
// zero is exact), scale = 7 / amax with int8's rules (kernels/scalar/scale_limits.h), decoding code x
// fl(1 / scale). Rounding to nearest even, or stochastic (unbiased) with Philox uniforms keyed by (seed,
// rank, step, tensor, element) of rounding_bits=16 or 8 bits (compressors/stochastic_rounding.h), as int8.
// Default block 64 (4.5 bits per element with the fp32 scale).
// Layout: [fp32 scale per block][4-bit two's complement codes, LSB-first]; the nibble 0x8 is invalid.
#include "compressors/block_codec.h"
#include "compressors/stochastic_rounding.h"
#include "core/error.h"
#include "kernels/cpu/bit_pack.h"
#include "kernels/cpu/block_scale_kernels.h"
#include "kernels/cpu/rounding_fields.h"


#if GRADCOMP_HAVE_CUDA
#include "compressors/cuda_launch.h"
#include "kernels/cuda/level_kernels.cuh"
#include "kernels/cuda/microscaling_kernels.cuh"
#include "kernels/cuda/validate_kernels.cuh"
#endif

namespace gradcomp {
namespace {

constexpr int kInt4Max = 7;

class Int4Codec final : public BlockCodec {
 public:
  explicit Int4Codec(const CodecSpec& spec)
      : BlockCodec(spec, blockSizeParam(spec, 64), Rotation::Supported),
        stochastic_(spec.getChoice("rounding", "nearest", {"nearest", "stochastic"}) == "stochastic"),
        roundingBits_(roundingBitsParam(spec, stochastic_)) {}
  CodecId id() const override { return CodecId::Int4; }
  CompressorTraits traits() const override {
    CompressorTraits t;
    t.stochastic = stochastic_;
    return t;
  }
  double varianceBound(size_t n, uint64_t) const override {
    return symmetricRoundingVarianceBound(n, blockSize(), 7, stochastic_);
  }

 protected:
  Sections sections(const WireHeader& h) const override { return scaleAndCodeSections(h, 4, 4); }
  uint32_t formatFlags() const override { return roundingFlags(stochastic_, roundingBits_); }
  void validateFlags(uint32_t flags) const override { validateRoundingFlags(flags, name()); }
  void encodeTile(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                  const EncodeContext& ctx, uint64_t&, bool) const override {
    encodeBlocks(h, x, begin, count, payload, ctx, nullptr);
  }
  // The NaN/Inf scan is the block maximum's: one pass over the tile, not two.
  uint64_t encodeTileChecked(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                             const EncodeContext& ctx, uint64_t&, bool) const override {
    uint64_t bad = EncodeResult::kNoIndex;
    encodeBlocks(h, x, begin, count, payload, ctx, &bad);
    return bad;
  }
  scalar::ScaleRule scaleRule(const WireHeader&) const override {
    return scalar::ScaleRule{.reciprocalOf = static_cast<float>(kInt4Max)};
  }
  void validatePayload(const WireHeader& h, const std::byte* payload) const override {
    const Sections sec = sections(h);
    validateBlockScales(reinterpret_cast<const float*>(payload + sec.offset[0]), sec.bytes[0] / 4, name(), scaleRule(h));
    const uint64_t element =
        cpu::firstInt4Minimum(reinterpret_cast<const uint8_t*>(payload + sec.offset[1]), h.numElements);
    GRADCOMP_CHECK(element >= h.numElements, DecodeError, name(), ": code -8 at element ", element,
                   " is outside the symmetric range [-7, 7]");
  }
  void decodeTile(const WireHeader& h, const std::byte* payload, uint64_t begin, uint64_t count, float* out,
                  bool accumulate) const override {
    const Sections sec = sections(h);
    const auto* scales = reinterpret_cast<const float*>(payload + sec.offset[0]);
    cpu::decodeInt4Blocks(reinterpret_cast<const uint8_t*>(payload + sec.offset[1]) + begin / 2, count, h.blockSize,
                          scales + begin / h.blockSize, out, accumulate);
  }
#if GRADCOMP_HAVE_CUDA
  void launchEncodeOnDevice(const DeviceEncode& d) const override {
    const cudaStream_t stream = cudapath::asStream(d.stream);
    cudapath::DeviceScratch<uint8_t> nibbles(d.n, stream);
    cudapath::check(cuda::launchEncodeInt4Blocks(d.grad, d.residualIn, d.n, d.h.blockSize,
                                                 (d.h.flags & kStochasticRoundingFlag) != 0,
                                                 d.rng.withRoundingBits(roundingBitsOfFlags(d.h.flags)), nibbles.get(),
                                                 reinterpret_cast<float*>(d.section(0)), d.residualOut, d.firstBad,
                                                 stream), "int4 encode");
    cudapath::check(cuda::launchPackCodes(nibbles.get(), d.n, 4, reinterpret_cast<uint32_t*>(d.section(1)), stream),
                    "int4 bit packing");
  }
  void launchCheckOnDevice(const DeviceCheck& d) const override {
    const cudaStream_t stream = cudapath::asStream(d.stream);
    cudapath::check(cuda::launchFindBadScales(reinterpret_cast<const float*>(d.section(0)), d.blocks(), d.scaleRule,
                                              d.firstBad, stream), "int4 scale check");
    cudapath::check(cuda::launchFindInt4Minimum(reinterpret_cast<const uint8_t*>(d.section(1)), d.h.numElements,
                                                d.firstBad, stream), "int4 code check");
  }
  void launchDecodeOnDevice(const DeviceDecode& d) const override {
    cudapath::check(cuda::launchDecodeInt4(reinterpret_cast<const uint8_t*>(d.section(1)), d.h.numElements,
                                           d.h.blockSize, reinterpret_cast<const float*>(d.section(0)), d.out,
                                           d.accumulate, cudapath::asStream(d.stream)), "int4 decode");
  }
#endif

 private:
  // The tile's uniforms (stochastic rounding) and blocks; firstBad as for cpu::encodeInt4Blocks, relative
  // to the tile.
  void encodeBlocks(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                    const EncodeContext& ctx, uint64_t* firstBad) const {
    const Sections sec = sections(h);
    auto* scales = reinterpret_cast<float*>(payload + sec.offset[0]);
    // The uniforms stay Philox fields until the codes widen them in registers (rounding_fields.h); the
    // next tile is prefetched as they are drawn, into L2: into L1 it took 7.18 against 6.35 ms per 16M
    // values at 8 bits on the AVX-512 path and 8.04 against 7.82 at 16, 6.12 against 5.63 at 8 bits on
    // AVX2 and even at 16, in alternated rounds (docs/notes.md, twenty-eighth part).
    const cpu::RoundingFields u =
        (h.flags & kStochasticRoundingFlag)
            ? tileRoundingFields(ctx, h.flags, begin, count, x + count, cpu::PrefetchInto::L2)
            : cpu::RoundingFields{};
    cpu::encodeInt4Blocks(x, count, h.blockSize, u, scales + begin / h.blockSize,
                          reinterpret_cast<uint8_t*>(payload + sec.offset[1]) + begin / 2, firstBad);
  }

  bool stochastic_;
  uint32_t roundingBits_;  // per stochastic-rounding uniform (compressors/stochastic_rounding.h)
};

}  // namespace

std::unique_ptr<Compressor> makeInt4Codec(const CodecSpec& spec) { return std::make_unique<Int4Codec>(spec); }

}  // namespace gradcomp
