// `fp8-e4m3`, `fp8-e5m2`: OCP FP8 with one fp32 scale per block (scale = max / amax, saturating).
// Layout: [scales: fp32 per block][codes: 1 byte per element]. The header's flags record the FP8
// flavour (0 = OCP); another flavour (e.g. AMD's FNUZ, bias 8/16) is refused by name.
#include "compressors/block_codec.h"
#include "core/error.h"
#include "kernels/cpu/block_scale_kernels.h"
#if GRADCOMP_HAVE_CUDA
#include "compressors/cuda_launch.h"
#include "kernels/cuda/block_scale_kernels.cuh"
#include "kernels/cuda/validate_kernels.cuh"
#endif

namespace gradcomp {
namespace {

constexpr uint32_t kFlavourOcp = 0;

class Fp8Codec final : public BlockCodec {
 public:
  Fp8Codec(const CodecSpec& spec, scalar::Fp8Format fmt)
      : BlockCodec(spec, blockSizeParam(spec, 128), Rotation::Supported), fmt_(fmt) {}
  CodecId id() const override { return fmt_ == scalar::Fp8Format::E4M3 ? CodecId::Fp8E4M3 : CodecId::Fp8E5M2; }
  CompressorTraits traits() const override { return {}; }

 protected:
  Sections sections(const WireHeader& h) const override { return scaleAndCodeSections(h, 4, 8); }
  uint32_t formatFlags() const override { return kFlavourOcp; }
  void validateFlags(uint32_t flags) const override {
    GRADCOMP_CHECK(flags == kFlavourOcp, DecodeError, name(), ": wire FP8 flavour ", flags == 1 ? "fnuz" : "unknown",
                   " (flags 0x", std::hex, flags, ") does not match this decoder's flavour ocp");
  }
  void encodeTile(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                  const EncodeContext& ctx, uint64_t& saturated, bool streamOut) const override {
    encodeTileChecked(h, x, begin, count, payload, ctx, saturated, streamOut);
  }
  // The NaN/Inf check is each block's maximum, which the scale needs anyway: one pass over the tile.
  uint64_t encodeTileChecked(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                             const EncodeContext&, uint64_t& saturated, bool) const override {
    const Sections sec = sections(h);
    auto* scales = reinterpret_cast<float*>(payload + sec.offset[0]);
    auto* codes = reinterpret_cast<uint8_t*>(payload + sec.offset[1]) + begin;
    const size_t bad = cpu::encodeFp8BlocksChecked(x, count, h.blockSize, fmt_, codes, scales + begin / h.blockSize, saturated);
    return bad == count ? EncodeResult::kNoIndex : bad;
  }
  void encodeTileResidual(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                          const EncodeContext&, uint64_t& saturated, float* residualOut, float*) const override {
    const Sections sec = sections(h);
    auto* scales = reinterpret_cast<float*>(payload + sec.offset[0]);
    auto* codes = reinterpret_cast<uint8_t*>(payload + sec.offset[1]) + begin;
    cpu::encodeFp8Blocks(x, count, h.blockSize, fmt_, codes, scales + begin / h.blockSize, saturated, residualOut);
  }
  scalar::ScaleRule scaleRule(const WireHeader&) const override { return scalar::ScaleRule{.reciprocalOf = scalar::fp8Spec(fmt_).maxValue}; }
  void validatePayload(const WireHeader& h, const std::byte* payload) const override {
    const Sections sec = sections(h);
    validateBlockScales(reinterpret_cast<const float*>(payload + sec.offset[0]), sec.bytes[0] / 4, name(), scaleRule(h));
    const size_t bad = cpu::firstNonFiniteFp8(reinterpret_cast<const uint8_t*>(payload + sec.offset[1]),
                                              h.numElements, fmt_);
    GRADCOMP_CHECK(bad == h.numElements, DecodeError, name(), ": payload holds a NaN/Inf code at element ", bad);
  }
  void decodeTile(const WireHeader& h, const std::byte* payload, uint64_t begin, uint64_t count, float* out,
                  bool accumulate) const override {
    const Sections sec = sections(h);
    const auto* scales = reinterpret_cast<const float*>(payload + sec.offset[0]);
    const auto* codes = reinterpret_cast<const uint8_t*>(payload + sec.offset[1]) + begin;
    forBlocksInTile(begin, count, h.blockSize, [&](uint64_t block, uint64_t off, uint64_t len) {
      cpu::decodeFp8Block(codes + off, len, fmt_, scales[block], out + off, accumulate);
    });
  }
#if GRADCOMP_HAVE_CUDA
  void launchEncodeOnDevice(const DeviceEncode& d) const override {
    cudapath::check(cuda::launchEncodeFp8Blocks(d.grad, d.residualIn, d.n, d.h.blockSize, fmt_,
                                                reinterpret_cast<uint8_t*>(d.section(1)),
                                                reinterpret_cast<float*>(d.section(0)), d.saturated, d.residualOut,
                                                d.firstBad, cudapath::asStream(d.stream)), "fp8 encode");
  }
  void launchCheckOnDevice(const DeviceCheck& d) const override {
    const cudaStream_t stream = cudapath::asStream(d.stream);
    cudapath::check(cuda::launchFindBadScales(reinterpret_cast<const float*>(d.section(0)), d.blocks(), d.scaleRule,
                                              d.firstBad, stream), "fp8 scale check");
    cudapath::check(cuda::launchFindNonFiniteFp8(reinterpret_cast<const uint8_t*>(d.section(1)), d.h.numElements, fmt_,
                                                 d.firstBad, stream), "fp8 code check");
  }
  void launchDecodeOnDevice(const DeviceDecode& d) const override {
    cudapath::check(cuda::launchDecodeFp8Blocks(reinterpret_cast<const uint8_t*>(d.section(1)), d.h.numElements,
                                                d.h.blockSize, fmt_, reinterpret_cast<const float*>(d.section(0)),
                                                d.out, d.accumulate, cudapath::asStream(d.stream)), "fp8 decode");
  }
#endif

 private:
  scalar::Fp8Format fmt_;
};

}  // namespace

std::unique_ptr<Compressor> makeFp8E4M3Codec(const CodecSpec& spec) {
  return std::make_unique<Fp8Codec>(spec, scalar::Fp8Format::E4M3);
}
std::unique_ptr<Compressor> makeFp8E5M2Codec(const CodecSpec& spec) {
  return std::make_unique<Fp8Codec>(spec, scalar::Fp8Format::E5M2);
}

}  // namespace gradcomp
