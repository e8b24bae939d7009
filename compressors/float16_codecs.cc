// `fp16`: IEEE half, round to nearest even, saturating at +-65504 with the saturations counted.
// Optional pre-scale (prescale=1/8, say, to keep a sum of 8 ranks in range): encode writes
// fp16(x * prescale), decode multiplies by fp32(1 / prescale). The pre-scale travels in the header.
#include <cmath>
#include <cstring>

#include "compressors/block_codec.h"
#include "core/error.h"
#include "kernels/cpu/cast_kernels.h"
#include "kernels/scalar/host_device.h"
#include "kernels/scalar/scale_limits.h"
#if GRADCOMP_HAVE_CUDA
#include "compressors/cuda_launch.h"
#include "kernels/cuda/cast_kernels.cuh"
#include "kernels/cuda/validate_kernels.cuh"
#endif

namespace gradcomp {
namespace {

constexpr float kHalfMax = 65504.0f;
constexpr uint32_t kFloatInfBits = 0x7f800000u;  // |bits| at or above: Inf or NaN

// Decoding is code x fl(1 / prescale): every fp16 value decodes finite iff 65504 does.
bool prescaleDecodes(float p) { return std::isnormal(p) && scalar::reciprocalScaleDecodes(p, kHalfMax); }

class Fp16Codec final : public BlockCodec {
 public:
  explicit Fp16Codec(const CodecSpec& spec)
      : BlockCodec(spec, 0), prescale_(static_cast<float>(spec.getDouble("prescale", 1.0, 0.0, 1e30))) {
    GRADCOMP_CHECK_ARG(prescaleDecodes(prescale_), "fp16: prescale ", prescale_, " is outside [",
                       scalar::smallestDecodableScale(kHalfMax), ", 1e30]: the decoder multiplies 65504 by 1/prescale");
  }
  CodecId id() const override { return CodecId::Fp16; }
  CompressorTraits traits() const override { return {}; }

 protected:
  Sections sections(const WireHeader& h) const override { return valueSection(h, 2, "fp16 values"); }
  uint32_t formatParam() const override { return scalar::floatBits(prescale_); }
  void validateParam(uint32_t param) const override {
    const float p = scalar::bitsToFloat(param);
    GRADCOMP_CHECK(prescaleDecodes(p), DecodeError, name(), ": header pre-scale ", p,
                   " is not a positive normal number at least ", scalar::smallestDecodableScale(kHalfMax),
                   " (decoding multiplies the largest fp16 value 65504 by 1/pre-scale, which must be finite)");
  }
  void encodeTile(const WireHeader&, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                  const EncodeContext&, uint64_t& saturated, bool streamOut) const override {
    saturated += cpu::encodeFp16(x, count, prescale_, reinterpret_cast<uint16_t*>(payload) + begin,
                                 streamOut);
  }
  // The cast sees every input: its largest |bits| tells Inf/NaN in the same pass; the index is searched
  // only when there is one.
  uint64_t encodeTileChecked(const WireHeader&, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                             const EncodeContext&, uint64_t& saturated, bool streamOut) const override {
    uint32_t largest = 0;
    saturated += cpu::encodeFp16(x, count, prescale_, reinterpret_cast<uint16_t*>(payload) + begin, streamOut,
                                 &largest);
    return largest >= kFloatInfBits ? firstNonFinite(std::span<const float>(x, count)) : EncodeResult::kNoIndex;
  }
  // Error feedback's step: the residual from the codes in registers (AVX-512), not a decode of the tile.
  void encodeTileResidual(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                          const EncodeContext&, uint64_t& saturated, float* residualOut, float*) const override {
    saturated += cpu::encodeFp16WithResidual(x, count, prescale_, 1.0f / scalar::bitsToFloat(h.param),
                                             reinterpret_cast<uint16_t*>(payload) + begin, residualOut);
  }
  void validatePayload(const WireHeader& h, const std::byte* payload) const override {
    const size_t bad = cpu::firstNonFiniteFp16(reinterpret_cast<const uint16_t*>(payload), h.numElements);
    GRADCOMP_CHECK(bad == h.numElements, DecodeError, name(), ": payload holds an Inf/NaN code at element ", bad);
  }
  bool validatesPerTile() const override { return true; }
  uint64_t tileMultiple() const override { return 8; }
  uint64_t decodeTileValidated(const WireHeader& h, const std::byte* payload, uint64_t begin, uint64_t count,
                               float* out) const override {
    const uint16_t* codes = reinterpret_cast<const uint16_t*>(payload) + begin;
    const size_t bad = cpu::decodeFp16Checked(codes, count, 1.0f / scalar::bitsToFloat(h.param), out, streamsDecode(h));
    return bad != count ? bad : EncodeResult::kNoIndex;
  }
  // Also the error-feedback path's decode into an L1 scratch tile: never streamed.
  void decodeTile(const WireHeader& h, const std::byte* payload, uint64_t begin, uint64_t count, float* out,
                  bool accumulate) const override {
    const float inv = 1.0f / scalar::bitsToFloat(h.param);
    cpu::decodeFp16(reinterpret_cast<const uint16_t*>(payload) + begin, count, inv, out, accumulate);
  }
#if GRADCOMP_HAVE_CUDA
  void launchEncodeOnDevice(const DeviceEncode& d) const override {
    cudapath::check(cuda::launchEncodeCast(cuda::CastFormat::Fp16, d.grad, d.residualIn, d.n,
                                           scalar::bitsToFloat(d.h.param), d.section(0), d.residualOut, d.saturated,
                                           d.firstBad, cudapath::asStream(d.stream)), "fp16 encode");
  }
  void launchCheckOnDevice(const DeviceCheck& d) const override {
    cudapath::check(cuda::launchFindNonFiniteCast(cuda::CastFormat::Fp16, d.section(0), d.h.numElements, d.firstBad,
                                                  cudapath::asStream(d.stream)), "fp16 payload check");
  }
  void launchDecodeOnDevice(const DeviceDecode& d) const override {
    // fp32(1 / prescale), as decodeTile.
    cudapath::check(cuda::launchDecodeCast(cuda::CastFormat::Fp16, d.section(0), d.h.numElements,
                                           1.0f / scalar::bitsToFloat(d.h.param), d.out, d.accumulate,
                                           cudapath::asStream(d.stream)), "fp16 decode");
  }
#endif

 private:
  float prescale_;
};

class Bf16Codec final : public BlockCodec {
 public:
  explicit Bf16Codec(const CodecSpec& spec) : BlockCodec(spec, 0) {}
  CodecId id() const override { return CodecId::Bf16; }
  CompressorTraits traits() const override { return {}; }

 protected:
  Sections sections(const WireHeader& h) const override { return valueSection(h, 2, "bf16 values"); }
  void encodeTile(const WireHeader&, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                  const EncodeContext&, uint64_t& saturated, bool streamOut) const override {
    saturated += cpu::encodeBf16(x, count, reinterpret_cast<uint16_t*>(payload) + begin, streamOut);
  }
  uint64_t encodeTileChecked(const WireHeader&, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                             const EncodeContext&, uint64_t& saturated, bool streamOut) const override {
    uint32_t largest = 0;
    saturated += cpu::encodeBf16(x, count, reinterpret_cast<uint16_t*>(payload) + begin, streamOut, &largest);
    return largest >= kFloatInfBits ? firstNonFinite(std::span<const float>(x, count)) : EncodeResult::kNoIndex;
  }
  // As fp16's: the residual from the codes in registers.
  void encodeTileResidual(const WireHeader&, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                          const EncodeContext&, uint64_t& saturated, float* residualOut, float*) const override {
    saturated += cpu::encodeBf16WithResidual(x, count, reinterpret_cast<uint16_t*>(payload) + begin, residualOut);
  }
  void validatePayload(const WireHeader& h, const std::byte* payload) const override {
    const size_t bad = cpu::firstNonFiniteBf16(reinterpret_cast<const uint16_t*>(payload), h.numElements);
    GRADCOMP_CHECK(bad == h.numElements, DecodeError, name(), ": payload holds an Inf/NaN code at element ", bad);
  }
  bool validatesPerTile() const override { return true; }
  uint64_t tileMultiple() const override { return 8; }
  uint64_t decodeTileValidated(const WireHeader& h, const std::byte* payload, uint64_t begin, uint64_t count,
                               float* out) const override {
    const uint16_t* codes = reinterpret_cast<const uint16_t*>(payload) + begin;
    const size_t bad = cpu::decodeBf16Checked(codes, count, out, streamsDecode(h));
    return bad != count ? bad : EncodeResult::kNoIndex;
  }
  void decodeTile(const WireHeader&, const std::byte* payload, uint64_t begin, uint64_t count, float* out,
                  bool accumulate) const override {
    cpu::decodeBf16(reinterpret_cast<const uint16_t*>(payload) + begin, count, out, accumulate);
  }
#if GRADCOMP_HAVE_CUDA
  void launchEncodeOnDevice(const DeviceEncode& d) const override {
    cudapath::check(cuda::launchEncodeCast(cuda::CastFormat::Bf16, d.grad, d.residualIn, d.n, 1.0f, d.section(0),
                                           d.residualOut, d.saturated, d.firstBad, cudapath::asStream(d.stream)),
                    "bf16 encode");
  }
  void launchCheckOnDevice(const DeviceCheck& d) const override {
    cudapath::check(cuda::launchFindNonFiniteCast(cuda::CastFormat::Bf16, d.section(0), d.h.numElements, d.firstBad,
                                                  cudapath::asStream(d.stream)), "bf16 payload check");
  }
  void launchDecodeOnDevice(const DeviceDecode& d) const override {
    cudapath::check(cuda::launchDecodeCast(cuda::CastFormat::Bf16, d.section(0), d.h.numElements, 1.0f, d.out,
                                           d.accumulate, cudapath::asStream(d.stream)), "bf16 decode");
  }
#endif
};

}  // namespace

std::unique_ptr<Compressor> makeFp16Codec(const CodecSpec& spec) { return std::make_unique<Fp16Codec>(spec); }
std::unique_ptr<Compressor> makeBf16Codec(const CodecSpec& spec) { return std::make_unique<Bf16Codec>(spec); }

}  // namespace gradcomp
