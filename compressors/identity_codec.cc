// `none`: fp32 as is. The baseline every codec is compared with, through the same wire format.
#include <cstring>

#include "compressors/block_codec.h"
#include "core/error.h"
#if GRADCOMP_HAVE_CUDA
#include "compressors/cuda_launch.h"
#include "kernels/cuda/cast_kernels.cuh"
#include "kernels/cuda/validate_kernels.cuh"
#endif

namespace gradcomp {
namespace {

class IdentityCodec final : public BlockCodec {
 public:
  explicit IdentityCodec(const CodecSpec& spec) : BlockCodec(spec, 0) {}
  CodecId id() const override { return CodecId::None; }
  CompressorTraits traits() const override {
    CompressorTraits t;
    t.lossless = true;
    return t;
  }

 protected:
  Sections sections(const WireHeader& h) const override { return valueSection(h, 4, "fp32 values"); }
  void encodeTile(const WireHeader&, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                  const EncodeContext&, uint64_t&, bool) const override {
    std::memcpy(reinterpret_cast<float*>(payload) + begin, x, count * sizeof(float));
  }
  void validatePayload(const WireHeader& h, const std::byte* payload) const override {
    const uint64_t bad = firstNonFinite({reinterpret_cast<const float*>(payload), h.numElements});
    GRADCOMP_CHECK(bad == EncodeResult::kNoIndex, DecodeError, name(), ": payload holds a non-finite value at element ",
                   bad);
  }
  void decodeTile(const WireHeader&, const std::byte* payload, uint64_t begin, uint64_t count, float* out,
                  bool accumulate) const override {
    const float* v = reinterpret_cast<const float*>(payload) + begin;
    if (accumulate) {
      for (uint64_t i = 0; i < count; ++i) out[i] += v[i];
    } else {
      std::memcpy(out, v, count * sizeof(float));
    }
  }
#if GRADCOMP_HAVE_CUDA
  void launchEncodeOnDevice(const DeviceEncode& d) const override {
    cudapath::check(cuda::launchEncodeCast(cuda::CastFormat::Fp32, d.grad, d.residualIn, d.n, 1.0f, d.section(0),
                                           d.residualOut, nullptr, d.firstBad, cudapath::asStream(d.stream)),
                    "fp32 encode");
  }
  void launchCheckOnDevice(const DeviceCheck& d) const override {
    cudapath::check(cuda::launchFindNonFiniteCast(cuda::CastFormat::Fp32, d.section(0), d.h.numElements, d.firstBad,
                                                  cudapath::asStream(d.stream)), "fp32 payload check");
  }
  void launchDecodeOnDevice(const DeviceDecode& d) const override {
    cudapath::check(cuda::launchDecodeCast(cuda::CastFormat::Fp32, d.section(0), d.h.numElements, 1.0f, d.out,
                                           d.accumulate, cudapath::asStream(d.stream)), "fp32 decode");
  }
#endif
};

}  // namespace

std::unique_ptr<Compressor> makeIdentityCodec(const CodecSpec& spec) { return std::make_unique<IdentityCodec>(spec); }

}  // namespace gradcomp
