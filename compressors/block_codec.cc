#include "compressors/block_codec.h"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <iomanip>
#include <sstream>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "compressors/cuda_paths.h"
#include "compressors/tile_ranges.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "kernels/cpu/cast_kernels.h"
#include "kernels/cpu/hadamard_rotation.h"
#include "kernels/cpu/microscaling_kernels.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/scalar/element_formats.h"
#include "kernels/scalar/host_device.h"

namespace gradcomp {
namespace {

// c[i] = g[i] + e[i]; returns max |c| bits (>= 0x7f800000 when some c is Inf or NaN). The next tile's g
// and e (the `next` values after these n) are pulled toward L2 as the pass goes, a line of each per 16
// values: the add pass is memory-bound and the encode after it compute-bound, and asked for here they
// arrive while this tile is encoded. (All 128 lines asked for in one burst after the pass stalled on the
// line fill buffers on the Xeon of 2026-12-04.)
uint32_t addAndMaxAbsBits(const float* g, const float* e, float* c, uint64_t n, uint64_t next) {
  uint32_t worst = 0;
  uint64_t i = 0;
#if defined(__AVX2__)
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff);
  __m256i acc = _mm256_setzero_si256();
  for (; i + 8 <= n; i += 8) {
    if (i % 16 == 0 && i < next) {
      cpu::prefetchFloats(g, n + i, n + i + 1, cpu::PrefetchInto::L2);
      cpu::prefetchFloats(e, n + i, n + i + 1, cpu::PrefetchInto::L2);
    }
    const __m256 v = _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_loadu_ps(e + i));
    _mm256_storeu_ps(c + i, v);
    acc = _mm256_max_epu32(acc, _mm256_and_si256(_mm256_castps_si256(v), absMask));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  for (uint32_t l : lanes) worst = std::max(worst, l);
#endif
  if (i < next) {  // what the vector loop did not ask for (or all of it, without AVX2)
    cpu::prefetchFloats(g, n + i, n + next, cpu::PrefetchInto::L2);
    cpu::prefetchFloats(e, n + i, n + next, cpu::PrefetchInto::L2);
  }
  for (; i < n; ++i) {
    c[i] = g[i] + e[i];
    worst = std::max(worst, scalar::absBits(c[i]));
  }
  return worst;
}

// Zeroes each section's padding and its last used byte (the tail bits of a bit-packed section), so the
// same input always gives the same bytes whatever the buffer held before.
void zeroPadding(const BlockCodec::Sections& sec, std::byte* payload) {
  for (int s = 0; s < sec.count; ++s) {
    const uint64_t end = s + 1 < sec.count ? sec.offset[s + 1] : sec.total;
    const uint64_t from = sec.offset[s] + (sec.bytes[s] ? sec.bytes[s] - 1 : 0);
    std::memset(payload + from, 0, end - from);
  }
}

// Rotation (rotate=hadamard) on the wire: flag bit 31 and log2 of the rotation block in bits 24..28 of
// the header's flags (the codec's own flags keep the low bits), and a 32-byte section before the codec's
// payload: [seed u64][step u32][tensor u32][k i32][12 zero bytes]. The decoder needs nothing else: it
// decodes, rotates back with D keyed by (seed, step, tensor) and multiplies by 2^k, the power of two the
// encoder divided by to keep the butterflies' sums below FLT_MAX.
constexpr uint32_t kRotatedFlag = 1u << 31;
constexpr int kRotationLog2Shift = 24;
constexpr uint32_t kRotationLog2Mask = 0x1fu << kRotationLog2Shift;
constexpr uint64_t kRotationSectionBytes = 32;
constexpr uint32_t kMaxRotationLog2 = 13;  // 8192 elements: the CUDA twin's block fits in shared memory
constexpr int kMaxRotationExponent = 127;

bool isRotated(const WireHeader& h) { return (h.flags & kRotatedFlag) != 0; }

// The header the codec itself sees: the rotation bits stripped.
WireHeader innerHeader(const WireHeader& h) {
  WireHeader c = h;
  c.flags &= ~(kRotatedFlag | kRotationLog2Mask);
  return c;
}

uint64_t rotationBytes(const WireHeader& h) { return isRotated(h) ? kRotationSectionBytes : 0; }

struct RotationSection {
  scalar::RotationKey key;
  int32_t exponent = 0;
};

void writeRotationSection(const RotationSection& r, std::byte* payload) {
  std::memset(payload, 0, kRotationSectionBytes);
  std::memcpy(payload, &r.key.seed, 8);
  std::memcpy(payload + 8, &r.key.step, 4);
  std::memcpy(payload + 12, &r.key.tensor, 4);
  std::memcpy(payload + 16, &r.exponent, 4);
}

RotationSection readRotationSection(const std::byte* payload, const char* codec) {
  RotationSection r;
  std::memcpy(&r.key.seed, payload, 8);
  std::memcpy(&r.key.step, payload + 8, 4);
  std::memcpy(&r.key.tensor, payload + 12, 4);
  std::memcpy(&r.exponent, payload + 16, 4);
  GRADCOMP_CHECK(r.exponent >= 0 && r.exponent <= kMaxRotationExponent, DecodeError, codec,
                 ": rotation scale exponent ", r.exponent, " is outside [0, ", kMaxRotationExponent, "]");
  for (uint64_t i = 20; i < kRotationSectionBytes; ++i)
    GRADCOMP_CHECK(payload[i] == std::byte{0}, DecodeError, codec, ": rotation section byte ", i,
                   " must be zero (reserved)");
  return r;
}

// The header, the rotation section and the zeroed padding of a rotated wire (innerSections: the codec's
// own sections); returns where the codec's own payload starts.
std::byte* startRotatedWire(const WireHeader& h, const BlockCodec::Sections& innerSections,
                            const RotationSection& section, std::span<std::byte> wire) {
  writeHeader(h, wire);
  std::byte* payload = wire.data() + kWireHeaderBytes;
  writeRotationSection(section, payload);
  std::byte* codecPayload = payload + kRotationSectionBytes;
  zeroPadding(innerSections, codecPayload);
  return codecPayload;
}

// Per-thread scratch of the rotated codecs (slot 0: the rotated values, 1: the rotated residual), at
// least n floats, reused across calls.
std::vector<float>& rotationScratch(int slot, uint64_t n) {
  thread_local std::vector<float> buffers[2];
  if (buffers[slot].size() < n) buffers[slot].resize(n);
  return buffers[slot];
}

// 2^e for e in [-127, 127] as a float (2^-127 is subnormal but exact).
float powerOfTwo(int e) {
  return e >= -126 ? scalar::bitsToFloat(static_cast<uint32_t>(127 + e) << 23) : scalar::bitsToFloat(0x00400000u);
}

}  // namespace

BlockCodec::BlockCodec(const CodecSpec& spec, uint32_t blockSize, Rotation rotation)
    : Compressor(spec), blockSize_(blockSize) {
  if (rotation == Rotation::Unsupported) return;
  // Left out of the canonical spec unless hadamard, so that of an unrotated codec stays what it was ("int8"
  // and "int8:rotate=none" -> "int8:block=256,rounding=nearest"), as ranks and stored runs compare it.
  if (spec.getChoiceOmittedAtDefault("rotate", "none", {"none", "hadamard"}) != "hadamard") {
    GRADCOMP_CHECK_ARG(!spec.has("rblock"), spec.name(), ": rblock= needs rotate=hadamard");
    return;
  }
  const uint64_t rb = spec.getUInt("rblock", 256, 2, uint64_t{1} << kMaxRotationLog2);
  GRADCOMP_CHECK_ARG((rb & (rb - 1)) == 0, spec.name(), ": rblock=", rb,
                     " must be a power of two (the Walsh-Hadamard transform's block)");
  while ((uint64_t{1} << rotationLog2_) < rb) ++rotationLog2_;
}

uint8_t* scratchCodes(uint64_t n) {
  thread_local std::vector<uint8_t> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

uint32_t blockSizeParam(const CodecSpec& spec, uint32_t fallback) {
  return static_cast<uint32_t>(spec.getUInt("block", fallback, 1, 1u << 24));
}

BlockCodec::Sections valueSection(const WireHeader& h, uint64_t bytesPerElement, const char* what) {
  BlockCodec::Sections s;
  SectionLayout layout;
  s.count = 1;
  s.bytes[0] = wireBytesFor(h.numElements, bytesPerElement, what);
  s.offset[0] = layout.add(s.bytes[0]);
  s.total = layout.totalBytes();
  return s;
}

BlockCodec::Sections scaleAndCodeSections(const WireHeader& h, uint64_t scaleBytesPerBlock, uint64_t codeBits) {
  BlockCodec::Sections s;
  SectionLayout layout;
  const uint64_t blocks = h.blockSize ? ceilDiv(h.numElements, h.blockSize) : 0;
  s.count = 2;
  s.bytes[0] = wireBytesFor(blocks, scaleBytesPerBlock, "block scales");
  s.offset[0] = layout.add(s.bytes[0]);
  s.bytes[1] = ceilDiv(wireBytesFor(h.numElements, codeBits, "codes"), 8);
  s.offset[1] = layout.add(s.bytes[1]);
  s.total = layout.totalBytes();
  return s;
}

void validateBlockScales(const float* scales, uint64_t numBlocks, const char* codec, const scalar::ScaleRule& rule) {
  for (uint64_t b = 0; b < numBlocks; ++b) {
    const float s = scales[b];
    if (scalar::scaleAccepted(s, rule)) continue;
    std::ostringstream accepted;
    accepted << std::setprecision(9);
    if (rule.reciprocalOf > 0)
      accepted << "[" << scalar::smallestDecodableScale(rule.reciprocalOf) << ", " << FLT_MAX
               << "], the scales whose reciprocal decodes the largest code " << rule.reciprocalOf << " to a finite value";
    else if (rule.qsgdLevels > 0)
      accepted << "[0, " << scalar::largestDecodableQsgdNorm(rule.qsgdLevels) << "], the norms that decode level "
               << rule.qsgdLevels << " to a finite value";
    else
      accepted << (rule.allowZero ? "[0, " : "(0, ") << FLT_MAX << "]";
    GRADCOMP_THROW(DecodeError, codec, ": block ", b, " carries an invalid scale ", std::setprecision(9), s,
                   " (accepted: ", accepted.str(), ")");
  }
}

void BlockCodec::validateFlags(uint32_t flags) const {
  GRADCOMP_CHECK(flags == 0, DecodeError, name(), ": unknown format flags 0x", std::hex, flags);
}

void BlockCodec::validateParam(uint32_t param) const {
  GRADCOMP_CHECK(param == 0, DecodeError, name(), ": header param must be 0, got ", param);
}

uint64_t BlockCodec::tileElements(uint32_t bs) const {
  // Whole blocks, starting on a byte of every bit-packed section; about 4 KiB of fp32, so the
  // non-finite scan and the encode read the tile from L1 (measured against 4096: fp8 and sign encode
  // faster, the rest within noise).
  const uint64_t unit = bs == 0 ? 8 : std::lcm<uint64_t>(bs, 8);
  constexpr uint64_t kTarget = 1024;
  return unit >= kTarget ? unit : (kTarget / unit) * unit;
}

WireHeader BlockCodec::headerFor(uint64_t n, uint32_t param) const {
  WireHeader h;
  h.codec = static_cast<uint16_t>(id());
  h.flags = formatFlags();
  h.blockSize = blockSize_;
  h.param = param;
  h.numElements = n;
  h.payloadBytes = sections(h).total;
  if (rotationLog2_) {
    h.flags |= kRotatedFlag | (rotationLog2_ << kRotationLog2Shift);
    h.payloadBytes += kRotationSectionBytes;
  }
  return h;
}

size_t BlockCodec::maxEncodedBytes(size_t numElements) const {
  return kWireHeaderBytes + headerFor(numElements, formatParam()).payloadBytes;
}

EncodeResult BlockCodec::encodeImpl(std::span<const float> in, std::span<std::byte> wire, const EncodeContext& ctx,
                                    const ExecContext& exec) const {
  if (rotationLog2_) return encodeRotated(in, {}, {}, wire, ctx, exec);
  std::unique_ptr<uint32_t[]> blockWords;
  const WireHeader h = headerFor(in.size(), paramKeepingBlockWords(in.data(), in.size(), exec, blockWords));
  writeHeader(h, wire);
  std::byte* payload = wire.data() + kWireHeaderBytes;
  zeroPadding(sections(h), payload);
  const uint64_t n = in.size(), tile = tileElements(h.blockSize) * tileMultiple(), numTiles = ceilDiv(n, tile);
  // Past 16 MiB of input the wire is far larger than the caches: skip the read-for-ownership.
  const bool stream = n >= (uint64_t{1} << 22);
  std::vector<uint64_t> saturated(std::max(1, exec.cpuThreads), 0), bad(saturated.size(), EncodeResult::kNoIndex);
  forTileRanges(numTiles, n, exec.cpuThreads, [&](uint64_t t0, uint64_t t1, uint64_t thread) {
    for (uint64_t t = t0; t < t1; ++t) {
      const uint64_t begin = t * tile, count = std::min(tile, n - begin);
      const bool streamOut = stream && count == tile;
      const uint64_t b = blockWords ? encodeTileCheckedWithBlockWords(h, in.data() + begin, begin, count, payload, ctx,
                                                                      saturated[thread], streamOut,
                                                                      blockWords.get() + begin / h.blockSize)
                                    : encodeTileChecked(h, in.data() + begin, begin, count, payload, ctx,
                                                        saturated[thread], streamOut);
      if (b != EncodeResult::kNoIndex) {
        bad[thread] = begin + b;
        break;
      }
    }
    if (stream) cpu::fenceStreamedStores();  // once per thread, after its last streamed tile
  });
  EncodeResult r;
  r.wireBytes = kWireHeaderBytes + h.payloadBytes;
  r.saturated = std::accumulate(saturated.begin(), saturated.end(), uint64_t{0});
  r.nonFiniteIndex = *std::min_element(bad.begin(), bad.end());
  return r;
}

EncodeResult BlockCodec::encodeWithResidualImpl(std::span<const float> grad, std::span<const float> residualIn,
                                                std::span<float> residualOut, std::span<std::byte> wire,
                                                const EncodeContext& ctx, const ExecContext& exec) const {
  if (rotationLog2_) return encodeRotated(grad, residualIn, residualOut, wire, ctx, exec);
  const WireHeader h = headerFor(grad.size(), paramFor(grad.data(), residualIn.data(), grad.size(), exec));
  writeHeader(h, wire);
  std::byte* payload = wire.data() + kWireHeaderBytes;
  zeroPadding(sections(h), payload);
  // Smaller tiles than plain encoding: the add pass is memory-bound and encode/decode compute-bound,
  // and short alternations let the hardware overlap them (measured on fp16/int8/fp8: 4096 -> 256 elements took 1.9 -> 1.1, 2.1 -> 1.55 x memcpy).
  const uint64_t unit = h.blockSize == 0 ? 8 : std::lcm<uint64_t>(h.blockSize, 8);
  const uint64_t tile = unit >= 256 ? unit : (256 / unit) * unit;
  const uint64_t n = grad.size(), numTiles = ceilDiv(n, tile);
  std::vector<uint64_t> saturated(std::max(1, exec.cpuThreads), 0), bad(saturated.size(), EncodeResult::kNoIndex);
  forTileRanges(numTiles, n, exec.cpuThreads, [&](uint64_t t0, uint64_t t1, uint64_t thread) {
    std::vector<float> c(tile), decoded(tile);
    for (uint64_t t = t0; t < t1; ++t) {
      const uint64_t begin = t * tile, count = std::min(tile, n - begin);
      const float* g = grad.data() + begin;
      const float* e = residualIn.data() + begin;
      // c = g + e and its largest |c| bits in one pass (the next tile of this thread's range asked for on
      // the way); the exact index is searched only on failure.
      const uint64_t nextCount = t + 1 < t1 ? std::min(tile, n - begin - count) : 0;
      if (addAndMaxAbsBits(g, e, c.data(), count, nextCount) >= 0x7f800000u) {
        bad[thread] = begin + firstNonFinite(std::span<const float>(c.data(), count));
        return;
      }
      encodeTileResidual(h, c.data(), begin, count, payload, ctx, saturated[thread], residualOut.data() + begin,
                         decoded.data());
    }
  });
  EncodeResult r;
  r.wireBytes = kWireHeaderBytes + h.payloadBytes;
  r.saturated = std::accumulate(saturated.begin(), saturated.end(), uint64_t{0});
  r.nonFiniteIndex = *std::min_element(bad.begin(), bad.end());
  return r;
}

void BlockCodec::checkHeader(const WireHeader& h) const {
  if (blockSize_ == 0) {
    GRADCOMP_CHECK(h.blockSize == 0, DecodeError, name(), ": header block size must be 0, got ", h.blockSize);
  } else {
    GRADCOMP_CHECK(h.blockSize >= 1 && h.blockSize <= (1u << 24), DecodeError, name(), ": header block size ",
                   h.blockSize, " is outside [1, 2^24]");
  }
  GRADCOMP_CHECK(h.count == 0, DecodeError, name(), ": header count must be 0, got ", h.count);
  const uint32_t rotationLog2 = (h.flags & kRotationLog2Mask) >> kRotationLog2Shift;
  if (isRotated(h)) {
    GRADCOMP_CHECK(rotationLog2 >= 1 && rotationLog2 <= kMaxRotationLog2, DecodeError, name(),
                   ": rotation block 2^", rotationLog2, " is outside [2, 2^", kMaxRotationLog2, "]");
  } else {
    GRADCOMP_CHECK(rotationLog2 == 0, DecodeError, name(), ": rotation block bits set without the rotation flag");
  }
  const WireHeader inner = innerHeader(h);
  validateFlags(inner.flags);
  validateParam(inner.param);
  const uint64_t expected = sections(inner).total + rotationBytes(h);
  GRADCOMP_CHECK(h.payloadBytes == expected, DecodeError, name(), ": header announces ", h.payloadBytes,
                 " payload bytes, ", h.numElements, " elements with block size ", h.blockSize, " need ", expected);
}

void BlockCodec::decodeImpl(const WireHeader& h, const std::byte* payload, std::span<float> out, DecodeMode mode,
                            const ExecContext& exec) const {
  if (isRotated(h)) return decodeRotated(h, payload, out, mode, exec);
  const uint64_t n = out.size(), tile = tileElements(h.blockSize), numTiles = ceilDiv(n, tile);
  const bool accumulate = mode == DecodeMode::Accumulate;
  if (!accumulate && validatesPerTile()) {
    const uint64_t checkTile = tile * tileMultiple(), checkTiles = ceilDiv(n, checkTile);
    std::vector<uint64_t> bad(std::max(1, exec.cpuThreads), EncodeResult::kNoIndex);
    forTileRanges(checkTiles, n, exec.cpuThreads, [&](uint64_t t0, uint64_t t1, uint64_t thread) {
      for (uint64_t t = t0; t < t1; ++t) {
        const uint64_t begin = t * checkTile, count = std::min(checkTile, n - begin);
        if (decodeTileValidated(h, payload, begin, count, out.data() + begin) != EncodeResult::kNoIndex) {
          bad[thread] = begin;
          break;
        }
      }
      if (n >= (uint64_t{1} << 22)) cpu::fenceStreamedStores();
    });
    if (*std::min_element(bad.begin(), bad.end()) != EncodeResult::kNoIndex) {
      std::fill(out.begin(), out.end(), 0.0f);  // never a partial decode
      validatePayload(h, payload);              // throws, naming the first bad code
      GRADCOMP_THROW(Error, name(), ": a tile failed its check but the payload validates");
    }
    return;
  }
  // Accumulating (out holds the caller's sum): every code is checked before the first write.
  validatePayload(h, payload);
  forTileRanges(numTiles, n, exec.cpuThreads, [&](uint64_t t0, uint64_t t1, uint64_t) {
    for (uint64_t t = t0; t < t1; ++t) {
      const uint64_t begin = t * tile, count = std::min(tile, n - begin);
      decodeTile(h, payload, begin, count, out.data() + begin, accumulate);
    }
    // A codec may stream a large overwrite decode (fp16, bf16): order this thread's stores before the
    // caller or another thread reads out.
    if (n >= (uint64_t{1} << 22)) cpu::fenceStreamedStores();
  });
}

EncodeResult BlockCodec::encodeOnDevice(std::span<const float> grad, std::span<const float> residualIn,
                                        std::span<float> residualOut, std::span<std::byte> wire,
                                        const EncodeContext& ctx, const ExecContext& exec) const {
  if (rotationLog2_) return encodeRotatedOnDevice(grad, residualIn, residualOut, wire, ctx, exec);
  const WireHeader h =
      headerFor(grad.size(), paramFor(grad.data(), residualIn.empty() ? nullptr : residualIn.data(), grad.size(), exec));
  return cudapath::encodeBlock(h, sections(h), cudapath::EncodeBuffers::of(grad, residualIn, residualOut, wire), ctx,
                               exec, [this](const DeviceEncode& d) { launchEncodeOnDevice(d); });
}

void BlockCodec::decodeOnDevice(const WireHeader& h, const std::byte* payload, std::span<float> out, DecodeMode mode,
                                const ExecContext& exec) const {
  if (isRotated(h)) return decodeRotatedOnDevice(h, payload, out, mode, exec);
  checkPayloadOnDevice(h, payload, exec);
  cudapath::decodeBlock(h, sections(h), payload, out.data(), mode == DecodeMode::Accumulate, exec,
                        [this](const DeviceDecode& d) { launchDecodeOnDevice(d); });
}

void BlockCodec::checkPayloadOnDevice(const WireHeader& h, const std::byte* payload, const ExecContext& exec) const {
  if (cudapath::blockPayloadHasInvalid(h, sections(h), payload, scaleRule(h), exec,
                                       [this](const DeviceCheck& d) { launchCheckOnDevice(d); })) {
    const cudapath::HostPayloadCopy host(payload, h.payloadBytes, exec);
    validatePayload(h, host.get());  // throws the CPU path's DecodeError
    GRADCOMP_THROW(DecodeError, name(), ": the device check rejected the payload but the host copy passed; was the "
                   "wire buffer modified while it was being decoded?");
  }
}

// The rotation on CUDA buffers: the CPU's steps (encodeRotated / decodeRotated) with the device kernels,
// so the wire holds the CPU's bytes. c = g (+ e) is formed on the device and checked finite; its rotated
// copy y is what the codec's kernels encode; the residual comes back from the rotated domain.
EncodeResult BlockCodec::encodeRotatedOnDevice(std::span<const float> grad, std::span<const float> residualIn,
                                               std::span<float> residualOut, std::span<std::byte> wire,
                                               const EncodeContext& ctx, const ExecContext& exec) const {
  const uint64_t n = grad.size(), rb = uint64_t{1} << rotationLog2_;
  cudapath::DeviceFloats y(n, exec);
  cudapath::addOnDevice(grad.data(), residualIn.empty() ? nullptr : residualIn.data(), n, y.get(), exec);
  EncodeResult r;
  r.nonFiniteIndex = cudapath::firstNonFinite(y.get(), n, exec);
  if (r.nonFiniteIndex != EncodeResult::kNoIndex) return r;
  const float amax = cudapath::absMaxOnDevice(y.get(), n, exec);
  const int k = amax >= 0x1p100f ? scalar::floorLog2(amax) - 99 : 0;
  const RotationSection section{{ctx.seed, ctx.step, ctx.tensorId}, k};
  cudapath::rotateOnDevice(y.get(), nullptr, y.get(), n, rb, ctx.seed, ctx.step, ctx.tensorId, powerOfTwo(-k), false,
                           exec);
  const WireHeader h = headerFor(n, paramFor(y.get(), nullptr, n, exec));
  const WireHeader inner = innerHeader(h);
  std::byte prefix[kRotationSectionBytes];
  writeRotationSection(section, prefix);
  const bool withResidual = !residualIn.empty();
  std::optional<cudapath::DeviceFloats> zeros, rotatedResidual;
  cudapath::EncodeBuffers io;
  io.grad = y.get();
  io.n = n;
  io.wire = wire.data();
  if (withResidual) {  // the codec's fused step on y with a zero residual gives r_y = y - decoded(y)
    zeros.emplace(n, exec, true);
    rotatedResidual.emplace(n, exec);
    io.residualIn = zeros->get();
    io.residualOut = rotatedResidual->get();
  }
  const EncodeResult e = cudapath::encodeBlock(h, sections(inner), io, ctx, exec,
                                               [this](const DeviceEncode& d) { launchEncodeOnDevice(d); }, &inner,
                                               std::span<const std::byte>(prefix, kRotationSectionBytes));
  if (withResidual)
    cudapath::rotateOnDevice(rotatedResidual->get(), nullptr, residualOut.data(), n, rb, ctx.seed, ctx.step,
                             ctx.tensorId, powerOfTwo(k), true, exec);
  return e;
}

void BlockCodec::decodeRotatedOnDevice(const WireHeader& h, const std::byte* payload, std::span<float> out,
                                       DecodeMode mode, const ExecContext& exec) const {
  std::byte hostSection[kRotationSectionBytes];
  cudapath::copyToHost(hostSection, payload, kRotationSectionBytes, exec);
  const RotationSection section = readRotationSection(hostSection, name());
  const WireHeader inner = innerHeader(h);
  const std::byte* codecPayload = payload + kRotationSectionBytes;
  checkPayloadOnDevice(inner, codecPayload, exec);
  const uint64_t n = out.size(), rb = uint64_t{1} << ((h.flags & kRotationLog2Mask) >> kRotationLog2Shift);
  cudapath::DeviceFloats y(n, exec);
  cudapath::decodeBlock(inner, sections(inner), codecPayload, y.get(), false, exec,
                        [this](const DeviceDecode& d) { launchDecodeOnDevice(d); });
  cudapath::rotateOnDevice(y.get(), nullptr, y.get(), n, rb, section.key.seed, section.key.step, section.key.tensor,
                           powerOfTwo(section.exponent), true, exec);
  const uint64_t bad = cudapath::firstNonFinite(y.get(), n, exec);
  GRADCOMP_CHECK(bad == EncodeResult::kNoIndex, DecodeError, name(), ": the rotated payload decodes to a non-finite ",
                 "value at element ", bad, " (rotation scale 2^", section.exponent, ")");
  cudapath::writeOutOnDevice(y.get(), n, out.data(), mode == DecodeMode::Accumulate, exec);
}

// ---------------------------------------------------------------- Rotation
//
// encode: c = g (+ e), checked finite in the caller's coordinates; y = H D (c / 2^k) / sqrt(b); the codec's
// tiles encode y. With a residual, the codec's fused step gives r_y = y - decoded(y) in the rotated
// domain, and the residual is rotated back: e' = 2^k D H r_y / sqrt(b) = c - decode(wire) up to the
// rounding of the two rotations. So error feedback stays in the original domain, where the next step's
// gradient (rotated by another step's D) is added to it.
//
// The tensor is read twice: once for max |c| (the NaN/Inf check and the prescale 2^-k need the whole
// tensor), then chunk by chunk: a chunk of whole rotation blocks and whole tiles is formed, rotated and
// encoded in a per-thread buffer that stays in cache, and its residual rotated back into residualOut.
// The bytes are those of rotating the whole tensor first (encodeRotatedWhole, kept for a codec whose
// header param reads the rotated values, and for chunks that would not fit a cache): every block's
// rotation and every tile's encode sees the same values at the same tensor indices.
EncodeResult BlockCodec::encodeRotated(std::span<const float> grad, std::span<const float> residualIn,
                                       std::span<float> residualOut, std::span<std::byte> wire,
                                       const EncodeContext& ctx, const ExecContext& exec) const {
  constexpr uint64_t kMaxChunk = uint64_t{1} << 16;
  const uint64_t n = grad.size(), rb = uint64_t{1} << rotationLog2_;
  const uint64_t tile = tileElements(blockSize_), chunk = std::lcm(rb, tile);
  if (paramReadsValues() || chunk > kMaxChunk) return encodeRotatedWhole(grad, residualIn, residualOut, wire, ctx, exec);
  const bool withResidual = !residualIn.empty();
  // Encodes every chunk with the prescale 2^-k. `optimistic`: k = 0 taken on trust, each chunk's max |c|
  // checked (as its rotation reads it, before its tiles are encoded) and the pass abandoned at the first
  // chunk that holds a NaN/Inf or a value past 2^100; returns whether it finished.
  auto encodeChunks = [&](int k, bool optimistic, uint64_t& saturatedTotal) {
    const RotationSection section{{ctx.seed, ctx.step, ctx.tensorId}, k};
    const WireHeader h = headerFor(n, formatParam()), inner = innerHeader(h);
    std::byte* codecPayload = startRotatedWire(h, sections(inner), section, wire);
    std::vector<uint64_t> saturated(std::max(1, exec.cpuThreads), 0);
    std::atomic<bool> abandoned{false};
    forTileRanges(ceilDiv(n, chunk), n, exec.cpuThreads, [&](uint64_t c0, uint64_t c1, uint64_t thread) {
      std::vector<float>& y = rotationScratch(0, chunk);
      std::vector<float>& rotatedResidual = rotationScratch(1, withResidual ? chunk : 0);
      std::vector<float> decoded(withResidual ? tile : 0);
      for (uint64_t c = c0; c < c1 && !abandoned.load(std::memory_order_relaxed); ++c) {
        const uint64_t first = c * chunk, count = std::min(chunk, n - first);
        const float* src = grad.data() + first;
        if (withResidual) {
          for (uint64_t j = 0; j < count; ++j) y[j] = grad[first + j] + residualIn[first + j];
          src = y.data();
        }
        // The next chunk's input toward L2 while this one is rotated and encoded (arithmetic): otherwise
        // one thread reads a chunk with the arithmetic idle, then computes with the memory idle. rotate +
        // int4 encode 2.35 -> 2.11x memcpy (2 threads 1.34 -> 1.23); two or four chunks ahead: the same.
        // Asked for after the rotation where there is no residual, so that the burst overlaps the tiles'
        // arithmetic rather than the rotation's own loads of this chunk (8.6-9.2 against 9.5-10.6 ms per
        // 16M values); with one, before it (after: error feedback's 1 ms slower).
        const auto prefetchNextChunk = [&] {
          if (c + 1 >= c1) return;
          const uint64_t next = first + count, nextCount = std::min(chunk, n - next);
          cpu::prefetchFloats(grad.data(), next, next + nextCount, cpu::PrefetchInto::L2);
          if (withResidual) cpu::prefetchFloats(residualIn.data(), next, next + nextCount, cpu::PrefetchInto::L2);
        };
        if (withResidual) prefetchNextChunk();
        // The optimistic pass's check reads the chunk's max |c| off the rotation's own read of it (a
        // separate pass over the chunk was a fifth of rotation + int4's encode); a chunk that fails it
        // is rotated for nothing, and its tiles are not encoded.
        uint32_t chunkMaxBits = 0;
        cpu::rotateForward(src, y.data(), count, rb, section.key, powerOfTwo(-k), first,
                           optimistic ? &chunkMaxBits : nullptr);
        if (optimistic && chunkMaxBits >= scalar::floatBits(0x1p100f)) {
          abandoned = true;
          return;
        }
        if (!withResidual) prefetchNextChunk();
        for (uint64_t off = 0; off < count; off += tile) {
          const uint64_t len = std::min(tile, count - off);
          if (withResidual)
            encodeTileResidual(inner, y.data() + off, first + off, len, codecPayload, ctx, saturated[thread],
                               rotatedResidual.data() + off, decoded.data());
          else
            encodeTile(inner, y.data() + off, first + off, len, codecPayload, ctx, saturated[thread], false);
        }
        if (withResidual)
          cpu::rotateInverse(rotatedResidual.data(), residualOut.data() + first, count, rb, section.key,
                             powerOfTwo(k), first);
      }
    });
    saturatedTotal = std::accumulate(saturated.begin(), saturated.end(), uint64_t{0});
    return !abandoned;
  };
  EncodeResult r;
  r.wireBytes = kWireHeaderBytes + headerFor(n, formatParam()).payloadBytes;
  // Without a residual the input is only read, so a pass abandoned half-way can start again: the usual
  // tensor (finite, below 2^100) is then read from memory once. With one, residualOut may be residualIn,
  // so its values must not be written before the whole input is known to be finite.
  if (!withResidual && encodeChunks(0, true, r.saturated)) return r;
  const float amax = withResidual ? cpu::absMaxOfSum(grad.data(), residualIn.data(), n) : cpu::absMax(grad.data(), n);
  if (!scalar::isFiniteBits(scalar::floatBits(amax))) {
    uint64_t i = 0;
    while (i < n && std::isfinite(withResidual ? grad[i] + residualIn[i] : grad[i])) ++i;
    r = EncodeResult{};
    r.nonFiniteIndex = i;
    return r;
  }
  // Keep |y| below 2^101: a block's sums then stay below 2^114, far from FLT_MAX.
  encodeChunks(amax >= 0x1p100f ? scalar::floorLog2(amax) - 99 : 0, false, r.saturated);
  return r;
}

EncodeResult BlockCodec::encodeRotatedWhole(std::span<const float> grad, std::span<const float> residualIn,
                                            std::span<float> residualOut, std::span<std::byte> wire,
                                            const EncodeContext& ctx, const ExecContext& exec) const {
  const uint64_t n = grad.size();
  const uint64_t rb = uint64_t{1} << rotationLog2_;
  // Per-thread buffers kept across calls: a fresh 4n-byte allocation per encode costs its page faults.
  std::vector<float>& y = rotationScratch(0, n);
  if (residualIn.empty()) {
    std::copy(grad.begin(), grad.end(), y.begin());
  } else {
    for (uint64_t i = 0; i < n; ++i) y[i] = grad[i] + residualIn[i];
  }
  EncodeResult r;
  r.nonFiniteIndex = firstNonFinite(std::span<const float>(y.data(), n));
  if (r.nonFiniteIndex != EncodeResult::kNoIndex) return r;
  // Keep |y| below 2^101: a block's sums then stay below 2^114, far from FLT_MAX.
  const float amax = cpu::absMax(y.data(), n);
  const int k = amax >= 0x1p100f ? scalar::floorLog2(amax) - 99 : 0;
  const RotationSection section{{ctx.seed, ctx.step, ctx.tensorId}, k};
  cpu::rotateForward(y.data(), y.data(), n, rb, section.key, powerOfTwo(-k));

  const WireHeader h = headerFor(n, paramFor(y.data(), nullptr, n, exec));
  const WireHeader inner = innerHeader(h);
  std::byte* codecPayload = startRotatedWire(h, sections(inner), section, wire);
  const bool withResidual = !residualIn.empty();
  std::vector<float>& rotatedResidual = rotationScratch(1, withResidual ? n : 0);
  const uint64_t tile = tileElements(h.blockSize), numTiles = ceilDiv(n, tile);
  std::vector<uint64_t> saturated(std::max(1, exec.cpuThreads), 0);
  forTileRanges(numTiles, n, exec.cpuThreads, [&](uint64_t t0, uint64_t t1, uint64_t thread) {
    std::vector<float> decoded(withResidual ? tile : 0);
    for (uint64_t t = t0; t < t1; ++t) {
      const uint64_t begin = t * tile, count = std::min(tile, n - begin);
      if (withResidual)
        encodeTileResidual(inner, y.data() + begin, begin, count, codecPayload, ctx, saturated[thread],
                           rotatedResidual.data() + begin, decoded.data());
      else
        encodeTile(inner, y.data() + begin, begin, count, codecPayload, ctx, saturated[thread], false);
    }
  });
  if (withResidual)
    cpu::rotateInverse(rotatedResidual.data(), residualOut.data(), n, rb, section.key, powerOfTwo(k));
  r.wireBytes = kWireHeaderBytes + h.payloadBytes;
  r.saturated = std::accumulate(saturated.begin(), saturated.end(), uint64_t{0});
  return r;
}

// decode: the codec's payload checks, its tiles into a scratch vector, the inverse rotation, and a check
// that every value is finite before anything is written to `out` (a forged exponent or a sum of
// maximal codes could overflow in the rotation).
// decode: the codec's tiles give y, rotated back (x 2^k) and checked finite. A chunk of whole rotation
// blocks and whole tiles at a time (as encodeRotated), so the decode, the rotation and the check read and
// write the chunk in cache: one pass over memory where the whole-tensor steps took four. An overwrite
// decodes into `out` itself (zeroed again if a value is non-finite: never a partial decode); an
// accumulating one into per-thread scratch first, added only once every chunk is known finite.
void BlockCodec::decodeRotated(const WireHeader& h, const std::byte* payload, std::span<float> out, DecodeMode mode,
                               const ExecContext& exec) const {
  constexpr uint64_t kMaxChunk = uint64_t{1} << 16;
  const RotationSection section = readRotationSection(payload, name());
  const WireHeader inner = innerHeader(h);
  const std::byte* codecPayload = payload + kRotationSectionBytes;
  validatePayload(inner, codecPayload);
  const uint64_t n = out.size(), tile = tileElements(h.blockSize);
  const uint64_t rb = uint64_t{1} << ((h.flags & kRotationLog2Mask) >> kRotationLog2Shift);
  const uint64_t chunk = std::min<uint64_t>(std::lcm(rb, tile), std::max<uint64_t>(n, 1));
  const float postscale = powerOfTwo(section.exponent);
  const bool accumulate = mode == DecodeMode::Accumulate;
  // A chunk's values in y (at the chunk's tensor offsets): decoded, rotated back, scanned. Returns the
  // first non-finite element's tensor index, or kNoIndex.
  auto decodeChunk = [&](uint64_t first, uint64_t count, float* y) {
    for (uint64_t off = 0; off < count; off += tile)
      decodeTile(inner, codecPayload, first + off, std::min(tile, count - off), y + off, false);
    cpu::rotateInverse(y, y, count, rb, section.key, postscale, first);
    const uint64_t bad = firstNonFinite(std::span<const float>(y, count));
    return bad == EncodeResult::kNoIndex ? bad : first + bad;
  };
  std::vector<uint64_t> bad(std::max(1, exec.cpuThreads), EncodeResult::kNoIndex);
  if (chunk > kMaxChunk) {  // a rotation block past the caches: the whole tensor in one scratch
    std::vector<float>& y = rotationScratch(0, n);
    bad[0] = decodeChunk(0, n, y.data());
    if (bad[0] == EncodeResult::kNoIndex) {
      for (uint64_t i = 0; i < n; ++i) out[i] = accumulate ? out[i] + y[i] : y[i];
    }
  } else if (!accumulate) {
    forTileRanges(ceilDiv(n, chunk), n, exec.cpuThreads, [&](uint64_t c0, uint64_t c1, uint64_t thread) {
      for (uint64_t c = c0; c < c1 && bad[thread] == EncodeResult::kNoIndex; ++c) {
        const uint64_t first = c * chunk;
        bad[thread] = decodeChunk(first, std::min(chunk, n - first), out.data() + first);
      }
    });
    if (*std::min_element(bad.begin(), bad.end()) != EncodeResult::kNoIndex) std::fill(out.begin(), out.end(), 0.0f);
  } else {
    // The tensor is decoded into scratch (every chunk checked) before the first value is added to out.
    std::vector<float>& y = rotationScratch(0, n);
    forTileRanges(ceilDiv(n, chunk), n, exec.cpuThreads, [&](uint64_t c0, uint64_t c1, uint64_t thread) {
      for (uint64_t c = c0; c < c1 && bad[thread] == EncodeResult::kNoIndex; ++c) {
        const uint64_t first = c * chunk;
        bad[thread] = decodeChunk(first, std::min(chunk, n - first), y.data() + first);
      }
    });
    if (*std::min_element(bad.begin(), bad.end()) == EncodeResult::kNoIndex) {
      forTileRanges(ceilDiv(n, chunk), n, exec.cpuThreads, [&](uint64_t c0, uint64_t c1, uint64_t) {
        const uint64_t begin = c0 * chunk, end = std::min(n, c1 * chunk);
        for (uint64_t i = begin; i < end; ++i) out[i] += y[i];
      });
    }
  }
  const uint64_t first = *std::min_element(bad.begin(), bad.end());
  GRADCOMP_CHECK(first == EncodeResult::kNoIndex, DecodeError, name(), ": the rotated payload decodes to a non-finite ",
                 "value at element ", first, " (rotation scale 2^", section.exponent, ")");
}

uint64_t BlockCodec::DeviceCheck::blocks() const { return h.blockSize ? ceilDiv(h.numElements, uint64_t{h.blockSize}) : 0; }

uint32_t BlockCodec::paramFor(const float*, const float*, uint64_t, const ExecContext&) const { return formatParam(); }

uint32_t BlockCodec::paramKeepingBlockWords(const float* x, uint64_t n, const ExecContext& exec,
                                            std::unique_ptr<uint32_t[]>&) const {
  return paramFor(x, nullptr, n, exec);
}

uint64_t BlockCodec::encodeTileCheckedWithBlockWords(const WireHeader& h, const float* x, uint64_t begin,
                                                     uint64_t count, std::byte* payload, const EncodeContext& ctx,
                                                     uint64_t& saturated, bool streamOut, const uint32_t*) const {
  return encodeTileChecked(h, x, begin, count, payload, ctx, saturated, streamOut);
}

uint64_t BlockCodec::encodeTileChecked(const WireHeader& h, const float* x, uint64_t begin, uint64_t count,
                                       std::byte* payload, const EncodeContext& ctx, uint64_t& saturated,
                                       bool streamOut) const {
  const uint64_t b = firstNonFinite(std::span<const float>(x, count));
  if (b != EncodeResult::kNoIndex) return b;
  encodeTile(h, x, begin, count, payload, ctx, saturated, streamOut);
  return EncodeResult::kNoIndex;
}

void BlockCodec::launchEncodeOnDevice(const DeviceEncode&) const {
  GRADCOMP_THROW(BackendUnavailable, "codec '", name(), "' has no CUDA encode");
}
void BlockCodec::launchCheckOnDevice(const DeviceCheck&) const {
  GRADCOMP_THROW(BackendUnavailable, "codec '", name(), "' has no CUDA payload check");
}
void BlockCodec::launchDecodeOnDevice(const DeviceDecode&) const {
  GRADCOMP_THROW(BackendUnavailable, "codec '", name(), "' has no CUDA decode");
}

}  // namespace gradcomp
