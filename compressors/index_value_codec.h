// Base of the codecs that send (index, value) pairs, `topk` and `threshold`: they share the wire
// (sparse_payload.h), the budget parameters (k / ratio, values=fp32|fp16) and the fused error
// feedback (only the sent coordinates of the residual change). Subclasses choose the coordinates.
#pragma once

#include "compressors/cuda_paths.h"
#include "compressors/sparse_payload.h"
#include "core/error.h"

namespace gradcomp {

class IndexValueCodec : public Compressor {
 public:
  CompressorTraits traits() const override {
    CompressorTraits t;
    t.sparse = true;
    t.reencodable = false;
    t.fixedSize = fixedSize_;
    return t;
  }
  uint64_t sparseEntries(size_t n) const override { return budget_.kFor(n, 0); }
  using Compressor::maxEncodedBytes;
  size_t maxEncodedBytes(size_t n) const override { return maxEncodedBytes(n, EncodeContext{}); }
  size_t maxEncodedBytes(size_t n, const EncodeContext& ctx) const override {
    return kWireHeaderBytes + sparseLayout(capacity(n, ctx), sparseFlags(n, fp16Values_)).total;
  }

 protected:
  IndexValueCodec(const CodecSpec& spec, bool fixedSize)
      : Compressor(spec),
        budget_(SparseBudget::fromSpec(spec)),
        fp16Values_(spec.getChoice("values", "fp32", {"fp32", "fp16"}) == "fp16"),
        fixedSize_(fixedSize) {}

  // Most entries one call may send.
  virtual uint64_t capacity(uint64_t n, const EncodeContext& ctx) const = 0;
  // Chooses coordinates of x (finite or not: report NaN/Inf through nonFiniteIndex).
  virtual SparseSelection select(std::span<const float> x, const EncodeContext& ctx, EncodeResult& stats) const = 0;
  // The same choice described for the CUDA path (compressors/cuda_paths.h): k, capacity, and for the
  // threshold codec its sample.
  virtual cudapath::SparsePlan devicePlan(uint64_t n, const EncodeContext& ctx) const = 0;

  const SparseBudget& budget() const { return budget_; }

  EncodeResult encodeImpl(std::span<const float> in, std::span<std::byte> wire, const EncodeContext& ctx,
                          const ExecContext&) const override {
    EncodeResult stats;
    const SparseSelection sel = select(in, ctx, stats);
    return finish(sel, in.size(), wire, stats);
  }

  EncodeResult encodeWithResidualImpl(std::span<const float> grad, std::span<const float> residualIn,
                                      std::span<float> residualOut, std::span<std::byte> wire,
                                      const EncodeContext& ctx, const ExecContext&) const override {
    // c = g + e lives in residualOut; only the sent coordinates change after encoding.
    for (size_t i = 0; i < grad.size(); ++i) residualOut[i] = grad[i] + residualIn[i];
    EncodeResult stats;
    const SparseSelection sel = select(residualOut, ctx, stats);
    const EncodeResult r = finish(sel, grad.size(), wire, stats);
    if (r.nonFiniteIndex == EncodeResult::kNoIndex) subtractSent(sel, fp16Values_, residualOut);
    return r;
  }

  EncodeResult encodeOnDevice(std::span<const float> grad, std::span<const float> residualIn,
                              std::span<float> residualOut, std::span<std::byte> wire, const EncodeContext& ctx,
                              const ExecContext& exec) const override {
    cudapath::SparsePlan plan = devicePlan(grad.size(), ctx);
    plan.fp16Values = fp16Values_;
    return cudapath::encodeIndexValue(id(), plan, cudapath::EncodeBuffers::of(grad, residualIn, residualOut, wire),
                                      exec);
  }

  void decodeOnDevice(const WireHeader& h, const std::byte* payload, std::span<float> out, DecodeMode mode,
                      const ExecContext& exec) const override {
    if (cudapath::sparsePayloadHasInvalid(h, payload, exec)) {
      const cudapath::HostPayloadCopy host(payload, h.payloadBytes, exec);
      validateSparsePayload(h, host.get(), name());  // throws the CPU path's DecodeError
      GRADCOMP_THROW(DecodeError, name(), ": the device check rejected the payload but the host copy passed");
    }
    cudapath::decodeIndexValue(h, payload, out.data(), mode == DecodeMode::Accumulate, exec);
  }

  void checkHeader(const WireHeader& h) const override { checkSparseHeader(h, name()); }
  void decodeImpl(const WireHeader& h, const std::byte* payload, std::span<float> out, DecodeMode mode,
                  const ExecContext& exec) const override {
    decodeSparseWire(h, payload, out, mode, name(), exec);
  }

 private:
  EncodeResult finish(const SparseSelection& sel, uint64_t n, std::span<std::byte> wire, EncodeResult stats) const {
    if (sel.nonFiniteIndex != EncodeResult::kNoIndex) {
      stats.nonFiniteIndex = sel.nonFiniteIndex;
      return stats;
    }
    const EncodeResult w = writeSelection(id(), n, fp16Values_, sel, wire);
    stats.wireBytes = w.wireBytes;
    stats.entries = w.entries;
    return stats;
  }

  SparseBudget budget_;
  bool fp16Values_;
  bool fixedSize_;
};

}  // namespace gradcomp
