// 1-bit codecs: `sign` (scaled sign, per-block mean |x|) and `onebit` (1-bit SGD, per-block means of
// the non-negative and negative parts). Bit conventions and sign(0) are documented in
// kernels/cpu/sign_kernels.h. Layout: [per-block scale(s)][1 bit per element, LSB-first].
#include <cmath>

#include "compressors/block_codec.h"
#include "core/error.h"
#include "kernels/cpu/sign_kernels.h"
#if GRADCOMP_HAVE_CUDA
#include "compressors/level_codes_on_device.h"
#include "kernels/cuda/validate_kernels.cuh"
#include "kernels/cuda/block_scale_kernels.cuh"
#endif

namespace gradcomp {
namespace {

class SignCodec final : public BlockCodec {
 public:
  explicit SignCodec(const CodecSpec& spec) : BlockCodec(spec, blockSizeParam(spec, 1024), Rotation::Supported) {}
  CodecId id() const override { return CodecId::Sign; }
  CompressorTraits traits() const override { return {}; }

 protected:
  Sections sections(const WireHeader& h) const override { return scaleAndCodeSections(h, 4, 1); }
  void encodeTile(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                  const EncodeContext&, uint64_t&, bool) const override {
    const Sections sec = sections(h);
    auto* scales = reinterpret_cast<float*>(payload + sec.offset[0]);
    auto* bits = reinterpret_cast<uint8_t*>(payload + sec.offset[1]);
    cpu::encodeSignBlocks(x, count, h.blockSize, begin, bits + begin / 8, scales + begin / h.blockSize);
  }
  // The encoder's largest |x| tells Inf/NaN in the same pass (as the casts'): the tile is read once.
  uint64_t encodeTileChecked(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                             const EncodeContext&, uint64_t&, bool) const override {
    const Sections sec = sections(h);
    auto* scales = reinterpret_cast<float*>(payload + sec.offset[0]);
    auto* bits = reinterpret_cast<uint8_t*>(payload + sec.offset[1]);
    uint32_t largest = 0;
    cpu::encodeSignBlocks(x, count, h.blockSize, begin, bits + begin / 8, scales + begin / h.blockSize, &largest);
    return largest >= 0x7f800000u ? firstNonFinite(std::span<const float>(x, count)) : EncodeResult::kNoIndex;
  }
  // Four or more whole blocks a tile (1024-element blocks by default), so the encoder interleaves their
  // sums; the tile's NaN/Inf scan and then its encode still read it from L1.
  uint64_t tileMultiple() const override { return 4; }
  scalar::ScaleRule scaleRule(const WireHeader&) const override { return scalar::ScaleRule{.allowZero = true}; }
  void validatePayload(const WireHeader& h, const std::byte* payload) const override {
    const Sections sec = sections(h);
    validateBlockScales(reinterpret_cast<const float*>(payload + sec.offset[0]), sec.bytes[0] / 4, name(), scaleRule(h));
  }
  void decodeTile(const WireHeader& h, const std::byte* payload, uint64_t begin, uint64_t count, float* out,
                  bool accumulate) const override {
    const Sections sec = sections(h);
    const auto* scales = reinterpret_cast<const float*>(payload + sec.offset[0]);
    const auto* bits = reinterpret_cast<const uint8_t*>(payload + sec.offset[1]);
    forBlocksInTile(begin, count, h.blockSize, [&](uint64_t block, uint64_t off, uint64_t len) {
      const uint64_t first = begin + off;
      cpu::decodeSignBlock(bits + first / 8, first % 8, len, scales[block], out + off, accumulate);
    });
  }
#if GRADCOMP_HAVE_CUDA
  void launchEncodeOnDevice(const DeviceEncode& d) const override {
    if (d.h.blockSize % 32 == 0) {  // whole warps per block: the fused ballot kernel
      cudapath::check(cuda::launchEncodeSignBlocks(d.grad, d.residualIn, d.n, d.h.blockSize,
                                                   reinterpret_cast<uint8_t*>(d.section(1)),
                                                   reinterpret_cast<float*>(d.section(0)), d.residualOut, d.firstBad,
                                                   cudapath::asStream(d.stream)), "sign encode");
      return;
    }
    cudapath::encodeLevelCodes(cuda::LevelCodec::Sign, 1, d);
  }
  void launchCheckOnDevice(const DeviceCheck& d) const override {
    cudapath::check(cuda::launchFindBadScales(reinterpret_cast<const float*>(d.section(0)), d.blocks(), d.scaleRule,
                                              d.firstBad, cudapath::asStream(d.stream)), "sign scale check");
  }
  void launchDecodeOnDevice(const DeviceDecode& d) const override {
    cudapath::check(cuda::launchDecodeSignBlocks(reinterpret_cast<const uint8_t*>(d.section(1)), d.h.numElements,
                                                 d.h.blockSize, reinterpret_cast<const float*>(d.section(0)), d.out,
                                                 d.accumulate, cudapath::asStream(d.stream)), "sign decode");
  }
#endif
};

class OneBitCodec final : public BlockCodec {
 public:
  explicit OneBitCodec(const CodecSpec& spec) : BlockCodec(spec, blockSizeParam(spec, 1024)) {}
  CodecId id() const override { return CodecId::OneBit; }
  CompressorTraits traits() const override { return {}; }

 protected:
  Sections sections(const WireHeader& h) const override { return scaleAndCodeSections(h, 8, 1); }
  void encodeTile(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                  const EncodeContext&, uint64_t&, bool) const override {
    const Sections sec = sections(h);
    auto* means = reinterpret_cast<float*>(payload + sec.offset[0]);
    auto* bits = reinterpret_cast<uint8_t*>(payload + sec.offset[1]);
    forBlocksInTile(begin, count, h.blockSize, [&](uint64_t block, uint64_t off, uint64_t len) {
      const uint64_t first = begin + off;
      const cpu::OneBitMeans m = cpu::encodeOneBitBlock(x + off, len, first % 8, bits + first / 8);
      means[2 * block] = m.positive;
      means[2 * block + 1] = m.negative;
    });
  }
  void validatePayload(const WireHeader& h, const std::byte* payload) const override {
    const Sections sec = sections(h);
    const auto* means = reinterpret_cast<const float*>(payload + sec.offset[0]);
    for (uint64_t b = 0; b < sec.bytes[0] / 8; ++b)
      GRADCOMP_CHECK(std::isfinite(means[2 * b]) && means[2 * b] >= 0.0f && std::isfinite(means[2 * b + 1]) &&
                         means[2 * b + 1] <= 0.0f,
                     DecodeError, name(), ": block ", b, " carries invalid means (", means[2 * b], ", ",
                     means[2 * b + 1], ")");
  }
  void decodeTile(const WireHeader& h, const std::byte* payload, uint64_t begin, uint64_t count, float* out,
                  bool accumulate) const override {
    const Sections sec = sections(h);
    const auto* means = reinterpret_cast<const float*>(payload + sec.offset[0]);
    const auto* bits = reinterpret_cast<const uint8_t*>(payload + sec.offset[1]);
    forBlocksInTile(begin, count, h.blockSize, [&](uint64_t block, uint64_t off, uint64_t len) {
      const uint64_t first = begin + off;
      cpu::decodeOneBitBlock(bits + first / 8, first % 8, len, {means[2 * block], means[2 * block + 1]}, out + off,
                             accumulate);
    });
  }
#if GRADCOMP_HAVE_CUDA
  void launchEncodeOnDevice(const DeviceEncode& d) const override { cudapath::encodeLevelCodes(cuda::LevelCodec::OneBit, 1, d); }
  void launchCheckOnDevice(const DeviceCheck& d) const override {
    cudapath::check(cuda::launchFindBadOneBitMeans(reinterpret_cast<const float*>(d.section(0)), d.blocks(), d.firstBad,
                                                   cudapath::asStream(d.stream)), "onebit means check");
  }
  void launchDecodeOnDevice(const DeviceDecode& d) const override { cudapath::decodeLevelCodes(cuda::LevelCodec::OneBit, 1, d); }
#endif
};

}  // namespace

std::unique_ptr<Compressor> makeSignCodec(const CodecSpec& spec) { return std::make_unique<SignCodec>(spec); }
std::unique_ptr<Compressor> makeOneBitCodec(const CodecSpec& spec) { return std::make_unique<OneBitCodec>(spec); }

}  // namespace gradcomp
