// `topk`: exact top-k by magnitude (k=N or ratio=R, default ratio 0.01), ties to the lower index,
// indices ascending; values fp32 or fp16. k > n is clamped to n; a ratio that rounds to 0 selects 1;
// k=0 is refused at construction. Selection: radix select over |x| bits (kernels/cpu/topk_select.h).
#include "compressors/index_value_codec.h"

namespace gradcomp {
namespace {

class TopKCodec final : public IndexValueCodec {
 public:
  explicit TopKCodec(const CodecSpec& spec) : IndexValueCodec(spec, true) {}
  CodecId id() const override { return CodecId::TopK; }

 protected:
  uint64_t capacity(uint64_t n, const EncodeContext& ctx) const override { return budget().kFor(n, ctx.kOverride); }
  SparseSelection select(std::span<const float> x, const EncodeContext& ctx, EncodeResult&) const override {
    return selectTopK(x, budget().kFor(x.size(), ctx.kOverride));
  }
  cudapath::SparsePlan devicePlan(uint64_t n, const EncodeContext& ctx) const override {
    cudapath::SparsePlan plan;
    plan.k = plan.capacity = budget().kFor(n, ctx.kOverride);
    return plan;
  }
};

}  // namespace

std::unique_ptr<Compressor> makeTopKCodec(const CodecSpec& spec) { return std::make_unique<TopKCodec>(spec); }

}  // namespace gradcomp
