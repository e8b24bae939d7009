// `nvfp4`: NVIDIA's FP4 format as its two-level scaling defines it. Blocks of 16 E2M1 elements share an
// E4M3 scale; the tensor carries one fp32 decode scale t = amax / (6 x 448), so that the largest block
// scale lands on E4M3's maximum. A block's scale code is E4M3(amax_block / (6 t)) (RNE, saturating),
// its factor f = fl(scale x t), and each element is E2M1(x / f) (RNE, saturating at 6); decoding is
// element x f. t travels in the header's param as fp32 bits; it depends on the data, so encoding reads
// the tensor (or grad + residual) once for its amax before the tiles. Layout: [E4M3 scale code per
// block][4-bit E2M1 codes, LSB-first].
//
// Validation: t must be a positive normal float with 6 x 448 x t finite; a block scale code must be a
// finite non-negative E4M3 number. Every E2M1 code is finite, so an accepted payload decodes finite.
#include <algorithm>
#include <cfloat>
#include <iomanip>
#include <memory>
#include <vector>

#include "compressors/block_codec.h"
#include "compressors/tile_ranges.h"
#include "core/error.h"
#include "kernels/cpu/bit_pack.h"
#include "kernels/cpu/microscaling_kernels.h"
#if GRADCOMP_HAVE_CUDA
#include "compressors/cuda_launch.h"
#include "compressors/cuda_paths.h"
#include "kernels/cuda/level_kernels.cuh"
#include "kernels/cuda/microscaling_kernels.cuh"
#endif

namespace gradcomp {
namespace {

constexpr uint32_t kNvfp4Block = 16;

class Nvfp4Codec final : public BlockCodec {
 public:
  explicit Nvfp4Codec(const CodecSpec& spec) : BlockCodec(spec, kNvfp4Block, Rotation::Supported) {}
  CodecId id() const override { return CodecId::NvFp4; }
  CompressorTraits traits() const override { return {}; }

 protected:
  Sections sections(const WireHeader& h) const override { return scaleAndCodeSections(h, 1, 4); }
  uint32_t formatParam() const override { return scalar::floatBits(scalar::nvfp4TensorScale(0.0f)); }
  uint32_t paramFor(const float* grad, const float* residual, uint64_t n, const ExecContext& exec) const override {
    float amax = 0.0f;
    if (exec.device == Device::Cuda) {
#if GRADCOMP_HAVE_CUDA
      amax = deviceAmax(grad, residual, n, exec);
#endif
    } else {
      amax = cpuAmax(n, exec, [&](uint64_t begin, uint64_t count) {
        return scalar::floatBits(residual ? cpu::absMaxOfSum(grad + begin, residual + begin, count)
                                          : cpu::absMax(grad + begin, count));
      });
    }
    return scalar::floatBits(scalar::nvfp4TensorScale(amax));
  }
  bool paramReadsValues() const override { return true; }
  // The plain encode's amax pass keeps each block's largest magnitude where the encoder reads them
  // (cpu::nvfp4EncodeUsesBlockMaxima): found in the same time as the amax alone (its reductions hide under
  // the read's memory stalls), they spare the tiles their own reductions (amax + encode 7.75 -> 6.95 ms per
  // 16M values on the Xeon of 2026-12-05, one thread; docs/notes.md, seventeenth part).
  uint32_t paramKeepingBlockWords(const float* x, uint64_t n, const ExecContext& exec,
                                  std::unique_ptr<uint32_t[]>& words) const override {
    if (exec.device == Device::Cuda || !cpu::nvfp4EncodeUsesBlockMaxima(kNvfp4Block))
      return paramFor(x, nullptr, n, exec);
    words = std::make_unique_for_overwrite<uint32_t[]>(ceilDiv(n, kNvfp4Block));
    const float amax = cpuAmax(n, exec, [&](uint64_t begin, uint64_t count) {
      return cpu::nvfp4BlockMaxBits(x + begin, count, kNvfp4Block, words.get() + begin / kNvfp4Block);
    });
    return scalar::floatBits(scalar::nvfp4TensorScale(amax));
  }
  uint64_t encodeTileCheckedWithBlockWords(const WireHeader& h, const float* x, uint64_t begin, uint64_t count,
                                           std::byte* payload, const EncodeContext&, uint64_t& saturated, bool,
                                           const uint32_t* words) const override {
    return encodeNvfp4Tile(h, x, begin, count, payload, saturated, words);
  }
  void validateParam(uint32_t param) const override {
    const float t = scalar::bitsToFloat(param);
    GRADCOMP_CHECK(scalar::nvfp4TensorScaleDecodes(t), DecodeError, name(), ": header tensor scale ",
                   std::setprecision(9), t, " is not a positive normal float with 6 x 448 x scale finite (accepted: [",
                   0x1p-126f, ", ", FLT_MAX / 2688.0f, "] or about)");
  }
  void validateFlags(uint32_t flags) const override {
    GRADCOMP_CHECK(flags == 0, DecodeError, name(), ": unknown format flags 0x", std::hex, flags);
  }
  void encodeTile(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                  const EncodeContext& ctx, uint64_t& saturated, bool streamOut) const override {
    encodeTileChecked(h, x, begin, count, payload, ctx, saturated, streamOut);
  }
  // The NaN/Inf scan is the block maximum's: one pass over the tile, not two.
  uint64_t encodeTileChecked(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                             const EncodeContext&, uint64_t& saturated, bool) const override {
    return encodeNvfp4Tile(h, x, begin, count, payload, saturated, nullptr);
  }
  // Error feedback's step: the residual from the codes in registers (AVX-512), not a decode of the tile.
  void encodeTileResidual(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                          const EncodeContext&, uint64_t& saturated, float* residualOut, float*) const override {
    const Sections sec = sections(h);
    saturated += cpu::encodeNvfp4BlocksPackedWithResidual(
        x, count, h.blockSize, scalar::bitsToFloat(h.param), reinterpret_cast<uint8_t*>(payload + sec.offset[1]) + begin / 2,
        reinterpret_cast<uint8_t*>(payload + sec.offset[0]) + begin / h.blockSize, residualOut);
  }
  // The NaN/Inf check is inside the encoder's own pass (as the casts'): 8 tiles a call, so its per-call
  // set-up (the E2M1 table, the scale lanes) is paid 8x less often.
  uint64_t tileMultiple() const override { return 8; }
  void validatePayload(const WireHeader& h, const std::byte* payload) const override {
    const Sections sec = sections(h);
    const auto* scaleCodes = reinterpret_cast<const uint8_t*>(payload + sec.offset[0]);
    for (uint64_t b = 0; b < sec.bytes[0]; ++b)
      GRADCOMP_CHECK(scalar::nvfp4ScaleCodeValid(scaleCodes[b]), DecodeError, name(), ": block ", b,
                     " carries E4M3 scale code 0x", std::hex, static_cast<int>(scaleCodes[b]), std::dec,
                     (scaleCodes[b] & 0x7f) == 0x7f ? " (NaN)" : " (negative)",
                     "; accepted: 0x00 .. 0x7e, the finite non-negative E4M3 numbers");
  }
  void decodeTile(const WireHeader& h, const std::byte* payload, uint64_t begin, uint64_t count, float* out,
                  bool accumulate) const override {
    const Sections sec = sections(h);
    const auto* scaleCodes = reinterpret_cast<const uint8_t*>(payload + sec.offset[0]);
    cpu::decodeNvfp4BlocksPacked(reinterpret_cast<const uint8_t*>(payload + sec.offset[1]) + begin / 2, count,
                                 h.blockSize, scaleCodes + begin / h.blockSize, scalar::bitsToFloat(h.param), out,
                                 accumulate);
  }
  // The largest of partOf(begin, count) (magnitude bits) over chunks of the tensor, split over the encode's
  // threads as its tiles are: one thread alone left this read, a third of a two-thread encode's time,
  // with the second thread idle. Combined as bits, as absMax compares them: a NaN part stays NaN (a float
  // max would drop it). Chunks start on block boundaries.
  template <typename PartOf>
  static float cpuAmax(uint64_t n, const ExecContext& exec, PartOf&& partOf) {
    constexpr uint64_t kChunk = uint64_t{1} << 16;
    std::vector<uint32_t> largest(static_cast<size_t>(std::max(1, exec.cpuThreads)), 0);
    forTileRanges(ceilDiv(n, kChunk), n, exec.cpuThreads, [&](uint64_t c0, uint64_t c1, uint64_t thread) {
      const uint64_t begin = c0 * kChunk, count = std::min(n, c1 * kChunk) - std::min(n, begin);
      if (count > 0) largest[thread] = partOf(begin, count);
    });
    return scalar::bitsToFloat(*std::max_element(largest.begin(), largest.end()));
  }
  // One tile's blocks; blockMaxBits, when kept, are the tile's blocks' largest magnitudes.
  uint64_t encodeNvfp4Tile(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                           uint64_t& saturated, const uint32_t* blockMaxBits) const {
    const Sections sec = sections(h);
    uint64_t bad = EncodeResult::kNoIndex;
    saturated += cpu::encodeNvfp4BlocksPacked(x, count, h.blockSize, scalar::bitsToFloat(h.param),
                                              reinterpret_cast<uint8_t*>(payload + sec.offset[1]) + begin / 2,
                                              reinterpret_cast<uint8_t*>(payload + sec.offset[0]) + begin / h.blockSize,
                                              &bad, blockMaxBits);
    return bad;
  }

#if GRADCOMP_HAVE_CUDA
  static float deviceAmax(const float* grad, const float* residual, uint64_t n, const ExecContext& exec) {
    const cudaStream_t stream = static_cast<cudaStream_t>(exec.cudaStream);
    GRADCOMP_CUDA_CHECK(cudaSetDevice(exec.cudaDevice));
    cudapath::DeviceScratch<unsigned> bits(1, stream);
    GRADCOMP_CUDA_CHECK(cudaMemsetAsync(bits.get(), 0, sizeof(unsigned), stream));
    cudapath::check(cuda::launchAbsMaxBits(grad, residual, n, bits.get(), stream), "nvfp4 tensor amax");
    unsigned host = 0;
    cudapath::copyToHost(&host, bits.get(), sizeof(host), exec);
    return scalar::bitsToFloat(host);
  }
  void launchEncodeOnDevice(const DeviceEncode& d) const override {
    const cudaStream_t stream = cudapath::asStream(d.stream);
    cudapath::DeviceScratch<uint8_t> codes(d.n, stream);
    cudapath::check(cuda::launchEncodeNvfp4Blocks(d.grad, d.residualIn, d.n, d.h.blockSize,
                                                  scalar::bitsToFloat(d.h.param), codes.get(),
                                                  reinterpret_cast<uint8_t*>(d.section(0)), d.residualOut, d.saturated,
                                                  d.firstBad, stream), "nvfp4 encode");
    cudapath::check(cuda::launchPackCodes(codes.get(), d.n, 4, reinterpret_cast<uint32_t*>(d.section(1)), stream),
                    "nvfp4 bit packing");
  }
  void launchCheckOnDevice(const DeviceCheck& d) const override {
    cudapath::check(cuda::launchFindBadNvfp4Scales(reinterpret_cast<const uint8_t*>(d.section(0)), d.blocks(),
                                                   d.firstBad, cudapath::asStream(d.stream)), "nvfp4 scale check");
  }
  void launchDecodeOnDevice(const DeviceDecode& d) const override {
    cudapath::check(cuda::launchDecodeNvfp4(reinterpret_cast<const uint8_t*>(d.section(1)), d.h.numElements,
                                            d.h.blockSize, reinterpret_cast<const uint8_t*>(d.section(0)),
                                            scalar::bitsToFloat(d.h.param), d.out, d.accumulate,
                                            cudapath::asStream(d.stream)), "nvfp4 decode");
  }
#endif
};

}  // namespace

std::unique_ptr<Compressor> makeNvfp4Codec(const CodecSpec& spec) { return std::make_unique<Nvfp4Codec>(spec); }

}  // namespace gradcomp
