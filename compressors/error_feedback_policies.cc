// The error-feedback policies (formulas in error_feedback.h).
#include <cmath>
#include <utility>

#include "compressors/dgc_warmup.h"
#include "compressors/error_feedback.h"
#include "compressors/scaled_error_feedback.h"
#include "core/error.h"

namespace gradcomp {
namespace {

class NoFeedback final : public ErrorFeedback {
 public:
  explicit NoFeedback(const CodecSpec& spec) : ErrorFeedback(spec, 0) {}
  bool sliceable() const override { return true; }

 protected:
  EncodeResult compressSliceFinite(const Compressor& codec, std::span<const float> grad, std::span<std::byte> wire,
                                   const EncodeContext& ctx, std::span<float>) override {
    return codec.encode(grad, wire, ctx);
  }
  EncodeResult compressFinite(const Compressor& codec, std::span<const float> grad, std::span<std::byte> wire,
                              const EncodeContext& ctx, TensorState&) override {
    return codec.encode(grad, wire, ctx);
  }
};

// Buffer 0: the residual e. With scale=auto and a codec that is not contractive (varianceBound omega >= 1),
// wire = C(gamma c) for gamma = 1 / (1 + omega): an unbiased codec's C is positively homogeneous (its
// scale, norm or maximum scales with c, its levels and random draws do not), so D(wire) is distributed as
// gamma D(C(c)), and E||gamma C(c) - c||^2 = (1 - gamma) ||c||^2 at the bound: contractive, which error
// feedback assumes. The residual is c - D(wire) either way, so the invariant g + e_before == D(wire) +
// e_after holds unchanged. A codec with omega < 1 is contractive as it is (delta = 1 - omega) and keeps
// the fused step, bit for bit plain ef.
class ResidualFeedback final : public ErrorFeedback {
 public:
  explicit ResidualFeedback(const CodecSpec& spec)
      : ErrorFeedback(spec, 1), scaled_(spec.getChoiceOmittedAtDefault("scale", "none", {"none", "auto"}) == "auto") {}
  bool sliceable() const override { return true; }

 protected:
  EncodeResult compressSliceFinite(const Compressor& codec, std::span<const float> grad, std::span<std::byte> wire,
                                   const EncodeContext& ctx, std::span<float> residual) override {
    return step(codec, grad, residual, wire, ctx);
  }
  EncodeResult compressFinite(const Compressor& codec, std::span<const float> grad, std::span<std::byte> wire,
                              const EncodeContext& ctx, TensorState& st) override {
    // In place: the gradient was checked finite before any state is touched, and a residual that
    // overflows mid-pass is reset to zero by the caller, so no copy is needed for a rollback.
    return step(codec, grad, st.buffers[0], wire, ctx);
  }

 private:
  EncodeResult step(const Compressor& codec, std::span<const float> grad, std::span<float> residual,
                    std::span<std::byte> wire, const EncodeContext& ctx) {
    const double omega = codec.varianceBound(grad.size(), ctx.kOverride);
    const double gamma = scaledFeedbackGamma(omega);
    if (!scaled_ || gamma == 1.0) {
      if (gamma < 1.0 && !warnedNotContractive_) {
        warnedNotContractive_ = true;
        warn(detail::concat("error feedback 'ef' with codec '", codec.canonicalSpec(), "': its variance bound omega = ",
                            omega, " on ", grad.size(), " values is >= 1, so it is not contractive and the residual "
                            "can grow without bound; ef:scale=auto sends C(c) / (1 + omega) instead"));
      }
      return codec.encodeWithResidual(grad, residual, residual, wire, ctx);
    }
    return encodeScaledWithResidual(codec, static_cast<float>(gamma), grad, residual, residual,
                                    wire, ctx, scratch(2 * grad.size()));
  }

  bool scaled_;
  bool warnedNotContractive_ = false;
};

// Buffer 0: -h (this worker's estimate, negated so the fused primitive computes g - h);
// buffer 1: H, the estimate shared by all workers, updated in finish().
class Ef21Feedback : public ErrorFeedback {
 public:
  explicit Ef21Feedback(const CodecSpec& spec, int buffers = 2) : ErrorFeedback(spec, buffers) {}

  void finish(uint32_t tensorId, std::span<float> reduced) override {
    std::vector<float>* shared = mutableStateBuffer(tensorId, 1);
    GRADCOMP_CHECK_ARG(shared && shared->size() == reduced.size(), "ef21: finish(", tensorId, ") with ",
                       reduced.size(), " elements, state has ", shared ? shared->size() : 0,
                       " (compress must come first)");
    float* h = shared->data();
    for (size_t i = 0; i < reduced.size(); ++i) {
      h[i] += reduced[i];
      reduced[i] = h[i];
    }
  }

 protected:
  EncodeResult compressFinite(const Compressor& codec, std::span<const float> grad, std::span<std::byte> wire,
                              const EncodeContext& ctx, TensorState& st) override {
    return compressEstimate(codec, grad, wire, ctx, st, scratch(grad.size()));
  }

  // EF21's step on the vector the estimate tracks (the gradient here, the momentum in ef21-sgdm):
  // encodeWithResidual(v, -h) sends C(v - h) and leaves r = (v - h) - D; then h' = h + D = v - r.
  static EncodeResult compressEstimate(const Compressor& codec, std::span<const float> v, std::span<std::byte> wire,
                                       const EncodeContext& ctx, TensorState& st, std::span<float> r) {
    const EncodeResult res = codec.encodeWithResidual(v, st.buffers[0], r, wire, ctx);
    std::vector<float>& negH = st.buffers[0];
    for (size_t i = 0; i < v.size(); ++i) negH[i] = r[i] - v[i];
    return res;
  }
};

// EF21-SGDM (Fatkhullin, Tyurin, Richtarik, NeurIPS 2023, "Momentum Provably Improves Error Feedback!"):
// EF21 on a momentum estimator v <- (1 - eta) v + eta g instead of on g. Buffers 0 and 1 as ef21 (-h, H);
// buffer 2: v. The optimizer sees H, the shared estimate of the momentum (so it is used without a
// momentum of its own, or with one if the experiment wants both).
class Ef21SgdmFeedback final : public Ef21Feedback {
 public:
  explicit Ef21SgdmFeedback(const CodecSpec& spec)
      : Ef21Feedback(spec, 3), eta_(static_cast<float>(spec.getDouble("eta", 0.1, 1e-9, 1.0))) {}

 protected:
  EncodeResult compressFinite(const Compressor& codec, std::span<const float> grad, std::span<std::byte> wire,
                              const EncodeContext& ctx, TensorState& st) override {
    const size_t n = grad.size();
    // v' goes to scratch first, so a failed encode leaves v as it was.
    std::vector<float>& work = scratch(2 * n);
    float* vNew = work.data();
    const std::vector<float>& v = st.buffers[2];
    const float keep = 1.0f - eta_;
    for (size_t i = 0; i < n; ++i) vNew[i] = keep * v[i] + eta_ * grad[i];
    const EncodeResult res = compressEstimate(codec, {vNew, n}, wire, ctx, st, {work.data() + n, n});
    std::copy(vNew, vNew + n, st.buffers[2].begin());
    return res;
  }

 private:
  float eta_;
};

// Buffer 0: momentum u; buffer 1: accumulated velocity v.
class DgcFeedback final : public ErrorFeedback {
 public:
  explicit DgcFeedback(const CodecSpec& spec)
      : ErrorFeedback(spec, 2),
        momentum_(static_cast<float>(spec.getDouble("momentum", 0.9, -1e-9, 0.999999))),
        clip_(spec.getDouble("clip", 0.0, -1e-300, 1e30)),
        warmup_(static_cast<uint32_t>(spec.getUInt("warmup", 0, 0, UINT32_MAX))) {}
  uint32_t warmupSteps() const override { return warmup_; }

 protected:
  uint64_t kOverride(const Compressor& codec, size_t n, const EncodeContext& ctx) const override {
    if (ctx.kOverride) return ctx.kOverride;
    return dgcWarmupEntries(codec.sparseEntries(n), n, ctx.step, warmup_);  // 0 after the warm-up: own k
  }

  EncodeResult compressFinite(const Compressor& codec, std::span<const float> grad, std::span<std::byte> wire,
                              const EncodeContext& ctx, TensorState& st) override {
    const size_t n = grad.size();
    std::vector<float>& u = st.buffers[0];
    std::vector<float>& v = st.buffers[1];
    float scale = 1.0f;
    if (clip_ > 0) {  // local gradient clipping by L2 norm
      double sq = 0;
      for (float g : grad) sq += static_cast<double>(g) * g;
      const double norm = std::sqrt(sq);
      if (norm > clip_) scale = static_cast<float>(clip_ / norm);
    }
    // u' = m u + g is needed before encoding; keep it in scratch so a failed step changes nothing.
    std::vector<float>& next = scratch(2 * n);
    float* uNew = next.data();
    float* vNew = next.data() + n;
    for (size_t i = 0; i < n; ++i) uNew[i] = momentum_ * u[i] + scale * grad[i];
    const EncodeResult r =
        codec.encodeWithResidual({uNew, n}, v, {vNew, n}, wire, ctx);  // c = v + u', v' = c - D(wire)
    std::copy(vNew, vNew + n, v.begin());
    // Factor masking: momentum stops where the coordinate was sent.
    std::vector<float> sent(n);
    codec.decode(wire.first(r.wireBytes), sent, DecodeMode::Overwrite);
    for (size_t i = 0; i < n; ++i) u[i] = sent[i] != 0.0f ? 0.0f : uNew[i];
    return r;
  }

 private:
  float momentum_;
  double clip_;
  uint32_t warmup_;
};

}  // namespace

std::unique_ptr<ErrorFeedback> makeNoFeedback(const CodecSpec& s) { return std::make_unique<NoFeedback>(s); }
std::unique_ptr<ErrorFeedback> makeResidualFeedback(const CodecSpec& s) { return std::make_unique<ResidualFeedback>(s); }
std::unique_ptr<ErrorFeedback> makeEf21Feedback(const CodecSpec& s) { return std::make_unique<Ef21Feedback>(s); }
std::unique_ptr<ErrorFeedback> makeEf21SgdmFeedback(const CodecSpec& s) { return std::make_unique<Ef21SgdmFeedback>(s); }
std::unique_ptr<ErrorFeedback> makeDgcFeedback(const CodecSpec& s) { return std::make_unique<DgcFeedback>(s); }

}  // namespace gradcomp
