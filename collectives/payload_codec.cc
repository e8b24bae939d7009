#include "collectives/payload_codec.h"

#include <chrono>

#include "compressors/registry.h"
#include "core/error.h"
#include "core/timing.h"

namespace gradcomp {
uint32_t segmentKey(uint32_t tensorId, size_t segment) {
  GRADCOMP_CHECK_ARG(tensorId <= kMaxTensorId, "tensor id ", tensorId, " exceeds the collectives' limit ",
                     kMaxTensorId, " (the id is combined with a 12-bit segment index)");
  GRADCOMP_CHECK_ARG(segment < kMaxSegments, "segment ", segment, " exceeds the limit of ", kMaxSegments,
                     " segments (world size too large for a segmented algorithm)");
  return (tensorId << 12) | static_cast<uint32_t>(segment);
}

PayloadCodec::PayloadCodec(const std::string& codecSpec, const std::string& errorFeedbackSpec)
    : codecSpec_(codecSpec.empty() ? "none" : codecSpec),
      efSpec_(errorFeedbackSpec.empty() ? "none" : errorFeedbackSpec),
      codec_(makeCompressor(codecSpec_)),
      unrotated_(codec_->rotationBlock() ? makeCompressor(codec_->spec().without({"rotate", "rblock"})) : nullptr),
      active_(codec_.get()),
      ef_(ErrorFeedback::make(efSpec_)),
      raw_(codec_->id() == CodecId::None && ef_->name() == "none") {}

PayloadCodec::RotatedDomain::RotatedDomain(PayloadCodec& codec) : codec_(codec) {
  GRADCOMP_CHECK_ARG(codec.unrotated_, "codec '", codec.codecSpec_, "' does not rotate: no rotated domain to sum in");
  codec.active_ = codec.unrotated_.get();
}

size_t PayloadCodec::encode(std::span<const float> x, std::span<std::byte> wire, const EncodeContext& ctx) {
  const auto t0 = std::chrono::steady_clock::now();
  const CompressOutcome out = ef_->compress(*active_, x, wire, ctx);
  cost_.encodeSeconds += secondsSince(t0);
  cost_.saturated += out.encoded.saturated;
  cost_.skipped += out.skipped ? 1 : 0;
  ++cost_.encodes;
  return out.encoded.wireBytes;
}

size_t PayloadCodec::encodeSlice(std::span<const float> x, std::span<std::byte> wire, const EncodeContext& ctx,
                                 size_t offset, size_t fullLength) {
  const auto t0 = std::chrono::steady_clock::now();
  const CompressOutcome out = ef_->compressSlice(*active_, x, wire, ctx, offset, fullLength);
  cost_.encodeSeconds += secondsSince(t0);
  cost_.saturated += out.encoded.saturated;
  cost_.skipped += out.skipped ? 1 : 0;
  ++cost_.encodes;
  return out.encoded.wireBytes;
}

uint64_t chunkSeed(uint64_t seed, size_t segment, size_t chunk) {
  uint64_t z = (static_cast<uint64_t>(segment) << 32) ^ static_cast<uint64_t>(chunk) ^ 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;  // splitmix64 finalizer
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return seed ^ (z ^ (z >> 31));
}

void PayloadCodec::decode(std::span<const std::byte> wire, std::span<float> out, DecodeMode mode) {
  const auto t0 = std::chrono::steady_clock::now();
  active_->decode(wire, out, mode);
  cost_.decodeSeconds += secondsSince(t0);
}

std::span<std::byte> WireBuffer::span(size_t bytes) {
  if (storage_.size() < bytes + 16) storage_.resize(bytes + 16);
  const auto base = reinterpret_cast<uintptr_t>(storage_.data());
  return {storage_.data() + ((16 - (base & 15)) & 15), bytes};
}

}  // namespace gradcomp
