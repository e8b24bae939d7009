// `threshold`: DGC's sparsification (Lin et al. 2018). The |x| threshold that keeps about k of n is
// estimated from a strided sample (at least sample=S elements, default 2^17, and enough for ~2048
// sampled hits; random start per step), then one filtering pass sends every element at or above it,
// indices ascending. The count is within about
// +-10 % of k on typical data; the wire holds up to 2k + 64 entries, and a step whose estimate would
// overshoot that falls back to exact top-k (reported as exactFallback). Same wire as `topk`.
#include <algorithm>
#include <cmath>

#include "compressors/index_value_codec.h"
#include "kernels/cpu/topk_select.h"
#include "kernels/scalar/philox.h"

namespace gradcomp {
namespace {

class ThresholdCodec final : public IndexValueCodec {
 public:
  explicit ThresholdCodec(const CodecSpec& spec)
      : IndexValueCodec(spec, false), sampleSize_(spec.getUInt("sample", 1u << 17, 16, 1u << 30)) {}
  CodecId id() const override { return CodecId::Threshold; }

 protected:
  uint64_t capacity(uint64_t n, const EncodeContext& ctx) const override {
    return std::min<uint64_t>(n, 2 * budget().kFor(n, ctx.kOverride) + 64);
  }

  cudapath::SparsePlan devicePlan(uint64_t n, const EncodeContext& ctx) const override {
    cudapath::SparsePlan plan;
    plan.k = budget().kFor(n, ctx.kOverride);
    plan.capacity = capacity(n, ctx);
    plan.threshold = true;
    plan.minSample = sampleSize_;
    plan.sampleOffset = scalar::RngStream::make(ctx.seed, ctx.rank, ctx.step, ctx.tensorId).word(0);
    return plan;
  }

  SparseSelection select(std::span<const float> x, const EncodeContext& ctx, EncodeResult& stats) const override {
    SparseSelection sel;
    const uint64_t n = x.size(), k = budget().kFor(n, ctx.kOverride);
    if (k == 0) return sel;
    const auto stream = scalar::RngStream::make(ctx.seed, ctx.rank, ctx.step, ctx.tensorId);
    const uint32_t t = cpu::sampledThreshold(x.data(), n, k, sampleSize_, stream.word(0));
    const uint64_t cap = capacity(n, ctx);
    // Gather one more than the capacity to learn whether the estimate overshot.
    sel.indices.resize(cap + 1);
    sel.values.resize(cap + 1);
    const size_t got = cpu::gatherAtLeast(x.data(), n, t, cap, sel.indices.data(), sel.values.data());
    if (got > cap) {
      stats.exactFallback = true;
      return selectTopK(x, k);  // its radix pass reports NaN/Inf too
    }
    // NaN and Inf exceed any finite threshold, so the filter pass has gathered them if present.
    for (size_t i = 0; i < got; ++i)
      if (!std::isfinite(sel.values[i])) {
        sel.nonFiniteIndex = sel.indices[i];
        return sel;
      }
    sel.indices.resize(got);
    sel.values.resize(got);
    return sel;
  }

 private:
  uint64_t sampleSize_;
};

}  // namespace

std::unique_ptr<Compressor> makeThresholdCodec(const CodecSpec& spec) { return std::make_unique<ThresholdCodec>(spec); }

}  // namespace gradcomp
