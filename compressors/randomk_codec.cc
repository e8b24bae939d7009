// `randomk`: k coordinates drawn by a keyed permutation (kernels/scalar/feistel_permutation.h) from
// (seed, step, tensor) -- not the rank -- so every rank picks the same coordinates and only the values
// travel; the sum of decoded payloads is the decoding of summed values (an all-reduce of values).
// Parameters: k=N or ratio=R, values=fp32|fp16, unbiased=true scales decoded values by n/k.
// Layout: [key: seed u64, step u32, tensor u32][values in permutation order].
#include <cmath>
#include <cstring>
#include <vector>

#include "compressors/cuda_paths.h"
#include "compressors/randomk_values.h"
#include "compressors/sparse_payload.h"
#include "compressors/tile_ranges.h"
#include "core/error.h"
#include "kernels/cpu/feistel_indices.h"
#include "kernels/scalar/feistel_permutation.h"
#include "kernels/scalar/float_formats.h"
#include "kernels/scalar/scale_limits.h"

namespace gradcomp {
namespace {

constexpr uint32_t kFp16Values = 1;
constexpr uint32_t kUnbiased = 2;
constexpr uint64_t kKeyBytes = 16;

// The payload's first 16 bytes: the permutation key every rank shares.
struct RandomKKey {
  uint64_t seed = 0;
  uint32_t step = 0, tensor = 0;
  static RandomKKey read(const std::byte* p) {
    RandomKKey k;
    std::memcpy(&k.seed, p, 8);
    std::memcpy(&k.step, p + 8, 4);
    std::memcpy(&k.tensor, p + 12, 4);
    return k;
  }
  void write(std::byte* p) const {
    std::memcpy(p, &seed, 8);
    std::memcpy(p + 8, &step, 4);
    std::memcpy(p + 12, &tensor, 4);
  }
};

// Throws DecodeError naming the first value that is not finite (fp32 or fp16 bits), or whose product
// with the unbiased scale n/k is not.
void checkRandomKValues(const std::byte* values, uint64_t count, bool fp16, float scale, const char* codec) {
  const auto* v32 = reinterpret_cast<const float*>(values);
  const auto* v16 = reinterpret_cast<const uint16_t*>(values);
  for (uint64_t j = 0; j < count; ++j) {
    const float v = fp16 ? scalar::halfBitsToFloat(v16[j]) : v32[j];
    GRADCOMP_CHECK(fp16 ? scalar::halfIsFinite(v16[j]) : std::isfinite(v), DecodeError, codec, ": value ", j,
                   " is not finite");
    GRADCOMP_CHECK(scalar::scaledValueDecodes(v, scale), DecodeError, codec, ": value ", j, " = ", v,
                   " overflows when scaled by n/k = ", scale, " (largest accepted magnitude ",
                   scalar::largestScaledValue(scale), ")");
  }
}

struct RandomKLayout {
  uint64_t valueOffset, total;
};

RandomKLayout randomKLayout(uint64_t k, uint32_t flags) {
  SectionLayout layout;
  layout.add(kKeyBytes);
  RandomKLayout l{};
  l.valueOffset = layout.add(wireBytesFor(k, (flags & kFp16Values) ? 2 : 4, "random-k values"));
  l.total = layout.totalBytes();
  return l;
}

class RandomKCodec final : public Compressor {
 public:
  explicit RandomKCodec(const CodecSpec& spec)
      : Compressor(spec),
        budget_(SparseBudget::fromSpec(spec)),
        flags_((spec.getChoice("values", "fp32", {"fp32", "fp16"}) == "fp16" ? kFp16Values : 0) |
               (spec.getBool("unbiased", false) ? kUnbiased : 0)) {}
  CodecId id() const override { return CodecId::RandomK; }
  CompressorTraits traits() const override {
    CompressorTraits t;
    t.sparse = true;
    t.sharedIndices = true;
    t.needsSharedSeed = true;
    t.stochastic = true;
    return t;
  }
  // With unbiased=true, C(x) = (n / k) x on k of n coordinates: E||C(x)||^2 = (n / k) ||x||^2, omega = n / k - 1.
  // Without it the codec is biased (and contractive: it keeps k / n of ||x||^2 in expectation): 0.
  double varianceBound(size_t n, uint64_t kOverride) const override {
    const uint64_t k = budget_.kFor(n, kOverride);
    return (flags_ & kUnbiased) && k > 0 ? static_cast<double>(n) / static_cast<double>(k) - 1.0 : 0.0;
  }
  uint64_t sparseEntries(size_t n) const override { return budget_.kFor(n, 0); }
  using Compressor::maxEncodedBytes;
  size_t maxEncodedBytes(size_t n) const override { return maxEncodedBytes(n, EncodeContext{}); }
  size_t maxEncodedBytes(size_t n, const EncodeContext& ctx) const override {
    return kWireHeaderBytes + randomKLayout(budget_.kFor(n, ctx.kOverride), flags_).total;
  }

 protected:
  EncodeResult encodeImpl(std::span<const float> in, std::span<std::byte> wire, const EncodeContext& ctx,
                          const ExecContext&) const override {
    std::vector<uint64_t> idx;
    return encodeSelected(in, wire, ctx, idx);
  }

  EncodeResult encodeWithResidualImpl(std::span<const float> grad, std::span<const float> residualIn,
                                      std::span<float> residualOut, std::span<std::byte> wire,
                                      const EncodeContext& ctx, const ExecContext&) const override {
    for (size_t i = 0; i < grad.size(); ++i) residualOut[i] = grad[i] + residualIn[i];
    std::vector<uint64_t> idx;
    const EncodeResult r = encodeSelected(residualOut, wire, ctx, idx);
    if (r.nonFiniteIndex != EncodeResult::kNoIndex) return r;
    const float scale = valueScale(grad.size(), idx.size(), flags_), limit = scalar::largestScaledValue(scale);
    for (uint64_t i : idx) residualOut[i] -= wireValue(residualOut[i], limit) * scale;
    return r;
  }

  EncodeResult encodeOnDevice(std::span<const float> grad, std::span<const float> residualIn,
                              std::span<float> residualOut, std::span<std::byte> wire, const EncodeContext& ctx,
                              const ExecContext& exec) const override {
    const uint64_t n = grad.size(), k = budget_.kFor(n, ctx.kOverride);
    const RandomKLayout l = randomKLayout(k, flags_);
    cudapath::RandomKPlan plan;
    plan.header.codec = static_cast<uint16_t>(id());
    plan.header.flags = flags_;
    plan.header.numElements = n;
    plan.header.count = k;
    plan.header.payloadBytes = l.total;
    RandomKKey{ctx.seed, ctx.step, ctx.tensorId}.write(plan.key);
    plan.valueOffset = l.valueOffset;
    plan.fp16Values = (flags_ & kFp16Values) != 0;
    plan.scale = valueScale(n, k, flags_);
    plan.seed = ctx.seed;
    plan.step = ctx.step;
    plan.tensor = ctx.tensorId;
    return cudapath::encodeRandomK(plan, cudapath::EncodeBuffers::of(grad, residualIn, residualOut, wire), exec);
  }

  void decodeOnDevice(const WireHeader& h, const std::byte* payload, std::span<float> out, DecodeMode mode,
                      const ExecContext& exec) const override {
    const RandomKLayout l = randomKLayout(h.count, h.flags);
    std::byte keyBytes[kKeyBytes];
    cudapath::copyToHost(keyBytes, payload, kKeyBytes, exec);
    const RandomKKey key = RandomKKey::read(keyBytes);
    const bool fp16 = h.flags & kFp16Values;
    if (cudapath::randomKValuesHaveInvalid(h, payload + l.valueOffset, fp16, valueScale(h.numElements, h.count, h.flags), exec)) {
      const cudapath::HostPayloadCopy host(payload, h.payloadBytes, exec);
      checkRandomKValues(host.get() + l.valueOffset, h.count, fp16, valueScale(h.numElements, h.count, h.flags), name());  // the CPU decoder's message
      GRADCOMP_THROW(DecodeError, name(), ": the device check rejected the payload but the host copy passed");
    }
    cudapath::decodeRandomK(h, payload + l.valueOffset, fp16, valueScale(h.numElements, h.count, h.flags), key.seed,
                            key.step, key.tensor, out.data(), mode == DecodeMode::Accumulate, exec);
  }

  void checkHeader(const WireHeader& h) const override {
    GRADCOMP_CHECK((h.flags & ~(kFp16Values | kUnbiased)) == 0, DecodeError, name(), ": unknown format flags 0x",
                   std::hex, h.flags);
    GRADCOMP_CHECK(h.blockSize == 0 && h.param == 0, DecodeError, name(), ": header block size / param must be 0");
    GRADCOMP_CHECK(h.count <= h.numElements, DecodeError, name(), ": header announces ", h.count, " entries for ",
                   h.numElements, " elements");
    const RandomKLayout l = randomKLayout(h.count, h.flags);
    GRADCOMP_CHECK(h.payloadBytes == l.total, DecodeError, name(), ": header announces ", h.payloadBytes,
                   " payload bytes, ", h.count, " values need ", l.total);
  }

  void decodeImpl(const WireHeader& h, const std::byte* payload, std::span<float> out, DecodeMode mode,
                  const ExecContext& exec) const override {
    const RandomKLayout l = randomKLayout(h.count, h.flags);
    const RandomKKey key = RandomKKey::read(payload);
    const bool fp16 = h.flags & kFp16Values;
    const auto* v32 = reinterpret_cast<const float*>(payload + l.valueOffset);
    const auto* v16 = reinterpret_cast<const uint16_t*>(payload + l.valueOffset);
    checkRandomKValues(payload + l.valueOffset, h.count, fp16, valueScale(h.numElements, h.count, h.flags), name());
    const float scale = valueScale(h.numElements, h.count, h.flags);
    const auto perm = scalar::FeistelPermutation::make(h.numElements, key.seed, key.step, key.tensor);
    const uint64_t n = out.size();
    // With several threads: the zeroing in contiguous ranges of `out`, then the coordinates and their
    // values in ranges of the permutation. A permutation's coordinates are distinct, so no two threads
    // ever write one element (accumulate included); the sum is the same in any split.
    constexpr uint64_t kZeroTile = uint64_t{1} << 16, kChunk = 4096;
    if (mode == DecodeMode::Overwrite)
      forTileRanges(ceilDiv(n, kZeroTile), n, exec.cpuThreads, [&](uint64_t t0, uint64_t t1, uint64_t) {
        std::fill(out.begin() + std::min(n, t0 * kZeroTile), out.begin() + std::min(n, t1 * kZeroTile), 0.0f);
      });
    forTileRanges(ceilDiv(h.count, kChunk), n, exec.cpuThreads, [&](uint64_t c0, uint64_t c1, uint64_t) {
      const uint64_t j0 = std::min(h.count, c0 * kChunk), j1 = std::min(h.count, c1 * kChunk);
      // The writes land at random places in `out`: compute the coordinates first, then scatter with
      // the target 32 entries ahead prefetched, so many cache misses are in flight at once.
      constexpr uint64_t kAhead = 32;
      thread_local std::vector<uint64_t> idx;
      idx.resize(j1 - j0);
      cpu::feistelIndices(perm, j0, j1 - j0, idx.data());
      for (uint64_t j = j0; j < j1; ++j) {
        if (j + kAhead < j1) __builtin_prefetch(out.data() + idx[j + kAhead - j0], 1);
        const float v = (fp16 ? scalar::halfBitsToFloat(v16[j]) : v32[j]) * scale;
        out[idx[j - j0]] += v;
      }
    });
  }

 private:
  static float valueScale(uint64_t n, uint64_t k, uint32_t flags) {
    return (flags & kUnbiased) && k ? static_cast<float>(static_cast<double>(n) / static_cast<double>(k)) : 1.0f;
  }
  // What the receiver gets for v before the scale: fp16 rounding, or fp32 clamped to `limit` (the largest
  // magnitude whose product with the unbiased scale stays finite; FLT_MAX without it).
  float wireValue(float v, float limit) const {
    return (flags_ & kFp16Values) ? scalar::halfBitsToFloat(scalar::floatToHalfBits(v)) : scalar::clampMagnitude(v, limit);
  }

  EncodeResult encodeSelected(std::span<const float> in, std::span<std::byte> wire, const EncodeContext& ctx,
                              std::vector<uint64_t>& idx) const {
    EncodeResult r;
    r.nonFiniteIndex = firstNonFinite(in);
    if (r.nonFiniteIndex != EncodeResult::kNoIndex) return r;
    const uint64_t n = in.size(), k = budget_.kFor(n, ctx.kOverride);
    const RandomKLayout l = randomKLayout(k, flags_);
    WireHeader h;
    h.codec = static_cast<uint16_t>(id());
    h.flags = flags_;
    h.numElements = n;
    h.count = k;
    h.payloadBytes = l.total;
    writeHeader(h, wire);
    std::byte* payload = wire.data() + kWireHeaderBytes;
    std::memset(payload, 0, l.total);
    RandomKKey{ctx.seed, ctx.step, ctx.tensorId}.write(payload);
    const auto perm = scalar::FeistelPermutation::make(n, ctx.seed, ctx.step, ctx.tensorId);
    idx.resize(k);
    auto* v32 = reinterpret_cast<float*>(payload + l.valueOffset);
    auto* v16 = reinterpret_cast<uint16_t*>(payload + l.valueOffset);
    cpu::feistelIndices(perm, 0, k, idx.data());
    const float limit = scalar::largestScaledValue(valueScale(n, k, flags_));
    constexpr uint64_t kAhead = 32;  // random reads: keep many misses in flight
    for (uint64_t j = 0; j < k; ++j) {
      if (j + kAhead < k) __builtin_prefetch(in.data() + idx[j + kAhead]);
      const float c = in[idx[j]];
      if (flags_ & kFp16Values) {
        v16[j] = scalar::floatToHalfBits(c);
      } else {
        v32[j] = scalar::clampMagnitude(c, limit);
        r.saturated += v32[j] != c;  // only with unbiased=true, for |c| beyond FLT_MAX / (n/k)
      }
    }
    r.wireBytes = kWireHeaderBytes + l.total;
    r.entries = k;
    return r;
  }

  SparseBudget budget_;
  uint32_t flags_;
};

}  // namespace

std::unique_ptr<Compressor> makeRandomKCodec(const CodecSpec& spec) { return std::make_unique<RandomKCodec>(spec); }

}  // namespace gradcomp

namespace gradcomp {

RandomKValues randomKValues(std::span<std::byte> wire) {
  const WireHeader h = parseHeader(wire);
  GRADCOMP_CHECK(h.codec == static_cast<uint16_t>(CodecId::RandomK), DecodeError, "expected a randomk wire, got codec ",
                 codecIdName(h.codec));
  GRADCOMP_CHECK((h.flags & ~(kFp16Values | kUnbiased)) == 0, DecodeError, "randomk: unknown format flags");
  const RandomKLayout l = randomKLayout(h.count, h.flags);
  GRADCOMP_CHECK(h.payloadBytes == l.total, DecodeError, "randomk: payload size does not match the value count");
  return {wire.data() + kWireHeaderBytes + l.valueOffset, h.count, (h.flags & kFp16Values) != 0};
}

}  // namespace gradcomp
