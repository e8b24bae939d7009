// The Compressor interface: a codec turns fp32 gradients into a self-describing wire buffer and back.
//
// Contract, for every codec:
//  * maxEncodedBytes(n) is an upper bound on what encode writes for n elements, never exceeded.
//  * encode rejects NaN/Inf input with a NonFiniteError naming the tensor and the first bad index.
//  * decode trusts nothing: the header and the payload's size are validated before the first write to
//    `out`, and so is every code and scale when accumulating. Overwrite-decoding may check the codes a
//    tile at a time as it decodes (the casts and int8: the payload is then read once); a rejected payload then
//    leaves `out` all zeros, never a partial decode.
//  * decode(..., Accumulate) adds into `out` in fp32 and equals overwrite-decoding then adding.
//  * encodeWithResidual(g, e, e') writes C(g + e) and e' = (g + e) - decode(C(g + e)): the primitive
//    every error-feedback policy is built on, fused so the residual costs one pass.
// Stochastic codecs draw from Philox keyed by (seed, rank, step, tensor, element): same context, same
// bytes; another rank, another stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>

#include "compressors/codec_spec.h"
#include "compressors/wire_format.h"
#include "core/exec_context.h"

namespace gradcomp {

struct EncodeContext {
  uint64_t seed = 0;
  uint32_t rank = 0;
  uint32_t step = 0;
  uint32_t tensorId = 0;
  uint64_t kOverride = 0;  // sparse codecs: entries to select this call (0 = the codec's own k / ratio)
};

struct EncodeResult {
  size_t wireBytes = 0;
  uint64_t saturated = 0;  // finite values clamped to the format's range (fp16 / bf16 / fp8 overflow)
  uint64_t entries = 0;    // sparse codecs: entries on the wire
  bool exactFallback = false;  // threshold: estimate overshot its capacity, exact top-k was used
  uint64_t nonFiniteIndex = kNoIndex;  // internal: first NaN/Inf seen by the kernel
  static constexpr uint64_t kNoIndex = std::numeric_limits<uint64_t>::max();
};

enum class DecodeMode { Overwrite, Accumulate };

struct CompressorTraits {
  bool lossless = false;
  bool fixedSize = true;       // encoded size depends only on n (and the configuration)
  bool sparse = false;         // carries a subset of coordinates
  bool sharedIndices = false;  // every rank sends the same coordinates (random-k with a shared seed)
  bool stochastic = false;     // uses the Philox stream
  bool needsSharedSeed = false;  // all ranks must use the same seed for a correct reduction
  bool reencodable = true;     // a decoded partial sum can be re-encoded per hop (compressed ring)
};

class Compressor {
 public:
  virtual ~Compressor() = default;

  virtual CodecId id() const = 0;
  const char* name() const { return codecIdName(static_cast<uint16_t>(id())); }
  const CodecSpec& spec() const { return spec_; }
  // The spec in normal form, defaults included (CodecSpec::canonical): equal for equivalent spellings.
  const std::string& canonicalSpec() const { return canonical_; }
  virtual CompressorTraits traits() const = 0;
  virtual size_t maxEncodedBytes(size_t numElements) const = 0;
  // The bound for one call: sparse codecs honour ctx.kOverride (DGC's warm-up sends more entries).
  virtual size_t maxEncodedBytes(size_t numElements, const EncodeContext& ctx) const {
    (void)ctx;
    return maxEncodedBytes(numElements);
  }

  // omega for an unbiased stochastic codec on n elements: E||C(x) - x||^2 <= omega ||x||^2 for every x (the
  // expectation over its random stream; E C(x) = x). 0 for the others (deterministic or biased codecs,
  // which error feedback needs no scaling for). Error feedback assumes a contractive compressor
  // (E||C(x) - x||^2 < ||x||^2); an unbiased one with omega >= 1 is not, but C / (1 + omega) is
  // (ef:scale=auto, compressors/error_feedback.h). kOverride: the entries a sparse codec sends when the
  // encode's context overrides them (EncodeContext::kOverride; 0: its own budget).
  virtual double varianceBound(size_t numElements, uint64_t kOverride = 0) const {
    (void)numElements;
    (void)kOverride;
    return 0.0;
  }

  // rotate=hadamard (compressors/block_codec.h): the rotation's block in elements; 0 for a codec that
  // does not rotate. The rotation is linear and keyed by (seed, step, tensor), never by rank, so the
  // compressed ring rotates a whole tensor once itself and sums in the rotated domain with the same codec
  // less its rotation (spec().without({"rotate", "rblock"})): collectives/ring_allreduce.cc.
  virtual uint64_t rotationBlock() const { return 0; }

  // Entries a sparse codec sends for n elements without an override (0 for dense codecs).
  virtual uint64_t sparseEntries(size_t numElements) const {
    (void)numElements;
    return 0;
  }

  EncodeResult encode(std::span<const float> in, std::span<std::byte> wire, const EncodeContext& ctx,
                      const ExecContext& exec = {}) const;

  // residualOut may alias residualIn. On NonFiniteError the outputs are unspecified; keep residualIn
  // distinct from residualOut to be able to roll back (the error-feedback policies do).
  EncodeResult encodeWithResidual(std::span<const float> grad, std::span<const float> residualIn,
                                  std::span<float> residualOut, std::span<std::byte> wire,
                                  const EncodeContext& ctx, const ExecContext& exec = {}) const;

  void decode(std::span<const std::byte> wire, std::span<float> out, DecodeMode mode,
              const ExecContext& exec = {}) const;

  // Validates everything in the header (codec, flags, sizes against the buffer) without reading the
  // payload: a receiver learns numElements before allocating. Throws DecodeError.
  WireHeader inspect(std::span<const std::byte> wire) const;

 protected:
  explicit Compressor(CodecSpec spec) : spec_(std::move(spec)) {}

  // Called with sizes and device checked and `wire` 16-byte aligned and at least maxEncodedBytes.
  virtual EncodeResult encodeImpl(std::span<const float> in, std::span<std::byte> wire, const EncodeContext& ctx,
                                  const ExecContext& exec) const = 0;
  // Default: c = g + e into residualOut, encode it, subtract its decoding. Codecs override to fuse.
  virtual EncodeResult encodeWithResidualImpl(std::span<const float> grad, std::span<const float> residualIn,
                                              std::span<float> residualOut, std::span<std::byte> wire,
                                              const EncodeContext& ctx, const ExecContext& exec) const;
  // Checks the codec-specific header fields and that payloadBytes is exactly what they imply.
  virtual void checkHeader(const WireHeader& header) const = 0;
  // Called after checkHeader, with numElements == out.size() and the payload 16-byte aligned. Must
  // validate the payload contents before writing to `out`.
  virtual void decodeImpl(const WireHeader& header, const std::byte* payload, std::span<float> out,
                          DecodeMode mode, const ExecContext& exec) const = 0;

  // The CUDA paths (exec.device == Cuda; every span is device memory; compressors/cuda_paths.h). Called
  // with the same checks done as for the CPU ones; residualIn empty means a plain encode. They must give
  // the CPU path's bytes, residuals and errors. The defaults refuse with BackendUnavailable (a codec
  // without CUDA kernels).
  virtual EncodeResult encodeOnDevice(std::span<const float> grad, std::span<const float> residualIn,
                                      std::span<float> residualOut, std::span<std::byte> wire,
                                      const EncodeContext& ctx, const ExecContext& exec) const;
  virtual void decodeOnDevice(const WireHeader& header, const std::byte* payload, std::span<float> out,
                              DecodeMode mode, const ExecContext& exec) const;

 private:
  // A parsed header checked against this codec (id, then its own fields): inspect() and the CUDA decode.
  WireHeader checkedForThisCodec(const WireHeader& h) const;

  CodecSpec spec_;
  std::string canonical_ = spec_.toString();
  friend std::unique_ptr<Compressor> makeCompressor(const CodecSpec& spec);  // sets canonical_
};

// Finds the first NaN/Inf (EncodeResult::kNoIndex if none).
uint64_t firstNonFinite(std::span<const float> x);

}  // namespace gradcomp
