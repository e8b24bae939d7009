// The OCP Microscaling formats (MX v1.0): `mxfp8` (elements E4M3, or E5M2 with elem=e5m2), `mxfp6`
// (E2M3, or E3M2) and `mxfp4` (E2M1). A block of 32 elements (the specification's k; block= changes it
// for ablations) shares one E8M0 scale X = 2^(floor(log2 amax) - emax), emax the exponent of the element
// format's largest normal; each element is x / X rounded to nearest even and saturated to the format's
// largest magnitude (kernels/scalar/element_formats.h). Layout: [E8M0 scale code per block][element codes,
// 8 / 6 / 4 bits each, LSB-first]. The header's flags name the element format, so any mxfp6 decoder reads
// either flavour.
//
// Validation: a scale code of 0xff (NaN) or one whose product with the largest element overflows fp32
// is rejected, as are FP8 NaN/Inf element codes; every FP6 / FP4 code is a finite number. An accepted
// payload therefore decodes to finite values.
#include "compressors/block_codec.h"
#include "core/error.h"
#include "kernels/cpu/bit_pack.h"
#include "kernels/cpu/block_scale_kernels.h"
#include "kernels/cpu/microscaling_kernels.h"
#if GRADCOMP_HAVE_CUDA
#include "compressors/cuda_launch.h"
#include "kernels/cuda/level_kernels.cuh"
#include "kernels/cuda/microscaling_kernels.cuh"
#include "kernels/cuda/validate_kernels.cuh"
#endif

namespace gradcomp {
namespace {

using scalar::ElementFormat;

// One MX codec: its wire id and the element formats its flags select (index = flag value).
struct MxFamily {
  CodecId id;
  const char* name;
  ElementFormat formats[2];
  int count;
};

constexpr MxFamily kMxFp8{CodecId::MxFp8, "mxfp8", {ElementFormat::E4M3, ElementFormat::E5M2}, 2};
constexpr MxFamily kMxFp6{CodecId::MxFp6, "mxfp6", {ElementFormat::E2M3, ElementFormat::E3M2}, 2};
constexpr MxFamily kMxFp4{CodecId::MxFp4, "mxfp4", {ElementFormat::E2M1, ElementFormat::E2M1}, 1};

constexpr uint32_t kMxBlock = 32;  // OCP MX v1.0: k = 32

uint32_t chooseFormat(const CodecSpec& spec, const MxFamily& family) {
  if (family.count == 1) return 0;
  const std::string first = scalar::elementFormatName(family.formats[0]);
  const std::string second = scalar::elementFormatName(family.formats[1]);
  return spec.getChoice("elem", first, {first, second}) == first ? 0 : 1;
}

class MxCodec final : public BlockCodec {
 public:
  MxCodec(const CodecSpec& spec, const MxFamily& family)
      : BlockCodec(spec, blockSizeParam(spec, kMxBlock), Rotation::Supported), family_(family), flags_(chooseFormat(spec, family)) {}
  CodecId id() const override { return family_.id; }
  CompressorTraits traits() const override { return {}; }

 protected:
  ElementFormat formatOf(const WireHeader& h) const { return family_.formats[h.flags]; }
  int bitsOf(const WireHeader& h) const { return scalar::elementSpec(formatOf(h)).bits; }

  Sections sections(const WireHeader& h) const override {
    return scaleAndCodeSections(h, 1, static_cast<uint64_t>(scalar::elementSpec(family_.formats[h.flags < 2 ? h.flags : 0]).bits));
  }
  uint32_t formatFlags() const override { return flags_; }
  void validateFlags(uint32_t flags) const override {
    GRADCOMP_CHECK(flags < static_cast<uint32_t>(family_.count), DecodeError, name(), ": unknown element format flag ",
                   flags, " (", family_.count == 1 ? "only 0 (e2m1)" : "0 or 1", " accepted)");
  }
  void encodeTile(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                  const EncodeContext& ctx, uint64_t& saturated, bool streamOut) const override {
    encodeTileChecked(h, x, begin, count, payload, ctx, saturated, streamOut);
  }
  // The NaN/Inf scan is the block maximum's: one pass over the tile, not two.
  uint64_t encodeTileChecked(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                             const EncodeContext&, uint64_t& saturated, bool) const override {
    const Sections sec = sections(h);
    const int bits = bitsOf(h);
    auto* scaleCodes = reinterpret_cast<uint8_t*>(payload + sec.offset[0]) + begin / h.blockSize;
    auto* packed = reinterpret_cast<uint8_t*>(payload + sec.offset[1]) + begin * bits / 8;
    uint64_t bad = EncodeResult::kNoIndex;
    saturated += cpu::encodeMxBlocksPacked(x, count, h.blockSize, formatOf(h), packed, scaleCodes, &bad);
    return bad;
  }
  // Error feedback's step: the residual from the codes in registers (AVX-512), not a decode of the tile.
  void encodeTileResidual(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                          const EncodeContext&, uint64_t& saturated, float* residualOut, float*) const override {
    const Sections sec = sections(h);
    auto* scaleCodes = reinterpret_cast<uint8_t*>(payload + sec.offset[0]) + begin / h.blockSize;
    auto* packed = reinterpret_cast<uint8_t*>(payload + sec.offset[1]) + begin * bitsOf(h) / 8;
    saturated += cpu::encodeMxBlocksPackedWithResidual(x, count, h.blockSize, formatOf(h), packed, scaleCodes, residualOut);
  }
  void validatePayload(const WireHeader& h, const std::byte* payload) const override {
    const Sections sec = sections(h);
    const scalar::ElementSpec s = scalar::elementSpec(formatOf(h));
    const auto* scaleCodes = reinterpret_cast<const uint8_t*>(payload + sec.offset[0]);
    for (uint64_t b = 0; b < sec.bytes[0]; ++b)
      GRADCOMP_CHECK(scalar::mxScaleCodeDecodes(scaleCodes[b], s), DecodeError, name(), ": block ", b,
                     " carries E8M0 scale code ", static_cast<int>(scaleCodes[b]),
                     scaleCodes[b] == scalar::kE8M0Nan ? " (NaN)" : "",
                     "; accepted: 0 .. ", 254 - s.emax, " (the codes whose product with the largest ",
                     scalar::elementFormatName(formatOf(h)), " value ", s.maxValue, " is finite)");
    if (s.bits == 8) {
      const auto fp8 = formatOf(h) == ElementFormat::E4M3 ? scalar::Fp8Format::E4M3 : scalar::Fp8Format::E5M2;
      const size_t bad = cpu::firstNonFiniteFp8(reinterpret_cast<const uint8_t*>(payload + sec.offset[1]),
                                                h.numElements, fp8);
      GRADCOMP_CHECK(bad == h.numElements, DecodeError, name(), ": payload holds a NaN/Inf element code at element ", bad);
    }
  }
  void decodeTile(const WireHeader& h, const std::byte* payload, uint64_t begin, uint64_t count, float* out,
                  bool accumulate) const override {
    const Sections sec = sections(h);
    const int bits = bitsOf(h);
    const auto* scaleCodes = reinterpret_cast<const uint8_t*>(payload + sec.offset[0]);
    const auto* packed = reinterpret_cast<const uint8_t*>(payload + sec.offset[1]) + begin * bits / 8;
    cpu::decodeMxBlocksPacked(packed, count, h.blockSize, formatOf(h), scaleCodes + begin / h.blockSize, out,
                              accumulate);
  }
#if GRADCOMP_HAVE_CUDA
  void launchEncodeOnDevice(const DeviceEncode& d) const override {
    const cudaStream_t stream = cudapath::asStream(d.stream);
    const int bits = bitsOf(d.h);
    auto* scaleCodes = reinterpret_cast<uint8_t*>(d.section(0));
    if (bits == 8) {
      cudapath::check(cuda::launchEncodeMxBlocks(d.grad, d.residualIn, d.n, d.h.blockSize, formatOf(d.h),
                                                 reinterpret_cast<uint8_t*>(d.section(1)), scaleCodes, d.residualOut,
                                                 d.saturated, d.firstBad, stream), "mx encode");
      return;
    }
    cudapath::DeviceScratch<uint8_t> codes(d.n, stream);
    cudapath::check(cuda::launchEncodeMxBlocks(d.grad, d.residualIn, d.n, d.h.blockSize, formatOf(d.h), codes.get(),
                                               scaleCodes, d.residualOut, d.saturated, d.firstBad, stream), "mx encode");
    cudapath::check(cuda::launchPackCodes(codes.get(), d.n, bits, reinterpret_cast<uint32_t*>(d.section(1)), stream),
                    "mx bit packing");
  }
  void launchCheckOnDevice(const DeviceCheck& d) const override {
    const cudaStream_t stream = cudapath::asStream(d.stream);
    cudapath::check(cuda::launchFindBadMxScales(reinterpret_cast<const uint8_t*>(d.section(0)), d.blocks(),
                                                formatOf(d.h), d.firstBad, stream), "mx scale check");
    if (bitsOf(d.h) == 8) {
      const auto fp8 = formatOf(d.h) == ElementFormat::E4M3 ? scalar::Fp8Format::E4M3 : scalar::Fp8Format::E5M2;
      cudapath::check(cuda::launchFindNonFiniteFp8(reinterpret_cast<const uint8_t*>(d.section(1)), d.h.numElements,
                                                   fp8, d.firstBad, stream), "mx element check");
    }
  }
  void launchDecodeOnDevice(const DeviceDecode& d) const override {
    cudapath::check(cuda::launchDecodeMx(reinterpret_cast<const uint8_t*>(d.section(1)), d.h.numElements,
                                         d.h.blockSize, formatOf(d.h), reinterpret_cast<const uint8_t*>(d.section(0)),
                                         d.out, d.accumulate, cudapath::asStream(d.stream)), "mx decode");
  }
#endif

 private:
  MxFamily family_;
  uint32_t flags_;
};

}  // namespace

std::unique_ptr<Compressor> makeMxFp8Codec(const CodecSpec& spec) { return std::make_unique<MxCodec>(spec, kMxFp8); }
std::unique_ptr<Compressor> makeMxFp6Codec(const CodecSpec& spec) { return std::make_unique<MxCodec>(spec, kMxFp6); }
std::unique_ptr<Compressor> makeMxFp4Codec(const CodecSpec& spec) { return std::make_unique<MxCodec>(spec, kMxFp4); }

}  // namespace gradcomp
