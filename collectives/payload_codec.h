// A codec and an error-feedback policy as the collectives use them. Every encode goes through the policy,
// keyed by (tensor, segment), so each rank keeps the residual of the compression error it made itself;
// every decode validates the peer's bytes before the first write. Encode and decode time are summed here
// so a report can say what the codec cost on the critical path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compressors/compressor.h"
#include "compressors/error_feedback.h"

namespace gradcomp {

// State and Philox key of segment `segment` of tensor `tensorId`: distinct per segment so two segments
// never share a residual or a random stream. Limits: tensorId < 2^20, segment < 4096 (checked).
uint32_t segmentKey(uint32_t tensorId, size_t segment);

// The Philox / random-k seed of one chunk of one segment: every chunk its own stream (the element
// counter restarts in each encode), the same on every rank.
uint64_t chunkSeed(uint64_t seed, size_t segment, size_t chunk);
inline constexpr uint32_t kMaxSegments = 4096;
inline constexpr uint32_t kMaxTensorId = (1u << 20) - 1;

struct CodecCost {
  double encodeSeconds = 0, decodeSeconds = 0;
  uint64_t saturated = 0;   // values clamped by the format (fp16 / fp8 overflow)
  uint64_t skipped = 0;     // non-finite steps sent as zeros (nonfinite=skip)
  uint64_t encodes = 0;
};

class PayloadCodec {
 public:
  PayloadCodec(const std::string& codecSpec, const std::string& errorFeedbackSpec);

  const Compressor& codec() const { return *codec_; }
  ErrorFeedback& errorFeedback() { return *ef_; }
  const ErrorFeedback& errorFeedback() const { return *ef_; }
  const std::string& codecSpec() const { return codecSpec_; }
  const std::string& errorFeedbackSpec() const { return efSpec_; }
  // Normal forms (defaults filled in): what the agreement check compares across ranks.
  const std::string& canonicalCodecSpec() const { return codec_->canonicalSpec(); }
  const std::string& canonicalErrorFeedbackSpec() const { return ef_->canonicalSpec(); }
  // codec none with no error feedback: the algorithms move raw fp32 instead of wire buffers.
  bool raw() const { return raw_; }

  // rotate=hadamard codecs: the rotation's block (Compressor::rotationBlock), 0 for the others.
  uint64_t rotationBlock() const { return codec_->rotationBlock(); }
  // While one is open, encodes, decodes and maxBytes go through the codec less its rotation: for an
  // algorithm that rotates the whole tensor itself and sums in the rotated domain (the compressed ring,
  // collectives/ring_allreduce.cc). The error feedback is the same object either way.
  class RotatedDomain {
   public:
    explicit RotatedDomain(PayloadCodec& codec);
    ~RotatedDomain() { codec_.active_ = codec_.codec_.get(); }
    RotatedDomain(const RotatedDomain&) = delete;
    RotatedDomain& operator=(const RotatedDomain&) = delete;

   private:
    PayloadCodec& codec_;
  };

  size_t maxBytes(size_t n, const EncodeContext& ctx) const { return ef_->maxEncodedBytes(*active_, n, ctx); }
  // maxBytes inside a RotatedDomain (the compressed ring's hops), from outside one: the cost model's.
  size_t maxHopBytes(size_t n, const EncodeContext& ctx) const {
    return ef_->maxEncodedBytes(unrotated_ ? *unrotated_ : *codec_, n, ctx);
  }
  // The first step past the error feedback's warm-up (DGC's first steps send up to a quarter of each
  // tensor): every later step sends as much. The cost model sizes and times this step.
  EncodeContext steadyStep(uint64_t seed = 0) const {
    EncodeContext ctx;
    ctx.seed = seed;
    ctx.step = ef_->warmupSteps();
    return ctx;
  }
  size_t encode(std::span<const float> x, std::span<std::byte> wire, const EncodeContext& ctx);
  // Encodes elements [offset, offset + x.size()) of tensor ctx.tensorId (fullLength elements): the
  // residual is the matching slice of the tensor's one residual (ErrorFeedback::compressSlice).
  size_t encodeSlice(std::span<const float> x, std::span<std::byte> wire, const EncodeContext& ctx, size_t offset,
                     size_t fullLength);
  void decode(std::span<const std::byte> wire, std::span<float> out, DecodeMode mode);

  CodecCost& cost() { return cost_; }

 private:
  std::string codecSpec_, efSpec_;
  std::unique_ptr<Compressor> codec_;
  std::unique_ptr<Compressor> unrotated_;  // rotate=hadamard codecs: the same codec without the rotation
  const Compressor* active_;               // codec_, or unrotated_ inside a RotatedDomain
  std::unique_ptr<ErrorFeedback> ef_;
  bool raw_;
  CodecCost cost_;
};

// A byte buffer whose data() is 16-byte aligned (the wire format's requirement), reused across calls.
class WireBuffer {
 public:
  std::span<std::byte> span(size_t bytes);
 private:
  std::vector<std::byte> storage_;
};

}  // namespace gradcomp
