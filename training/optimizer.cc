#include "training/optimizer.h"
#include "training/reproducible_math.h"

#include <cmath>
#include <istream>
#include <ostream>

#include "compressors/codec_spec.h"
#include "core/error.h"

namespace gradcomp {

Optimizer::Optimizer(std::string kind, size_t numParameters, int numBuffers) : kind_(std::move(kind)) {
  buffers_.assign(static_cast<size_t>(numBuffers), std::vector<float>(numParameters, 0.0f));
}

namespace {

constexpr uint32_t kOptimizerMagic = 0x4F505431;  // "OPT1"

void checkSizes(std::span<float> params, std::span<const float> grad, size_t n) {
  GRADCOMP_CHECK_ARG(params.size() == n && grad.size() == n, "optimizer for ", n, " parameters given ", params.size(),
                     " parameters and ", grad.size(), " gradients");
}

class Sgd final : public Optimizer {
 public:
  Sgd(const CodecSpec& s, size_t n)
      : Optimizer("sgd", n, 1),
        lr_(static_cast<float>(s.getDouble("lr", 0.1, 0, 1e6))),
        momentum_(static_cast<float>(s.getDouble("momentum", 0.9, -1e-12, 0.999999))),
        weightDecay_(static_cast<float>(s.getDouble("weight_decay", 0, -1e-12, 1))),
        nesterov_(s.getBool("nesterov", false)) {}
  std::string describe() const override {
    return "sgd:lr=" + std::to_string(lr_) + ",momentum=" + std::to_string(momentum_) +
           (nesterov_ ? ",nesterov=true" : "") + ",weight_decay=" + std::to_string(weightDecay_);
  }
  void step(std::span<float> params, std::span<const float> grad, uint64_t, const MomentumAllreduce&) override {
    auto& v = buffers_[0];
    checkSizes(params, grad, v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const float g = grad[i] + weightDecay_ * params[i];
      v[i] = momentum_ * v[i] + g;
      params[i] -= lr_ * (nesterov_ ? g + momentum_ * v[i] : v[i]);
    }
  }

 private:
  float lr_, momentum_, weightDecay_;
  bool nesterov_;
};

class Adam : public Optimizer {
 public:
  Adam(const CodecSpec& s, size_t n, const char* kind = "adam")
      : Optimizer(kind, n, 2),
        lr_(s.getDouble("lr", 1e-3, 0, 1e6)),
        beta1_(s.getDouble("beta1", 0.9, -1e-12, 0.999999)),
        beta2_(s.getDouble("beta2", 0.999, -1e-12, 0.999999999)),
        eps_(s.getDouble("eps", 1e-8, 0, 1)),
        weightDecay_(s.getDouble("weight_decay", 0, -1e-12, 1)) {}
  std::string describe() const override {
    return kind_ + ":lr=" + std::to_string(lr_) + ",beta1=" + std::to_string(beta1_) + ",beta2=" + std::to_string(beta2_);
  }
  void step(std::span<float> params, std::span<const float> grad, uint64_t step, const MomentumAllreduce&) override {
    adamStep(params, grad, step);
  }

 protected:
  // Bias-corrected Adam; `step` counts from 0.
  void adamStep(std::span<float> params, std::span<const float> grad, uint64_t step) {
    auto &m = buffers_[0], &v = buffers_[1];
    checkSizes(params, grad, m.size());
    const float c1 = static_cast<float>(1 - repro::powInt(beta1_, step + 1));
    const float c2 = static_cast<float>(1 - repro::powInt(beta2_, step + 1));
    const float b1 = static_cast<float>(beta1_), b2 = static_cast<float>(beta2_), lr = static_cast<float>(lr_);
    const float eps = static_cast<float>(eps_), wd = static_cast<float>(weightDecay_);
    for (size_t i = 0; i < m.size(); ++i) {
      const float g = grad[i] + wd * params[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      params[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
    }
  }
  double lr_, beta1_, beta2_, eps_, weightDecay_;
};

class OneBitAdam final : public Adam {
 public:
  OneBitAdam(const CodecSpec& s, size_t n)
      : Adam(s, n, "onebit-adam"), warmup_(s.getUInt("warmup", 100, 1, UINT32_MAX)) {}
  std::string describe() const override { return Adam::describe() + ",warmup=" + std::to_string(warmup_); }
  bool reducesGradients(uint64_t step) const override { return step < warmup_; }
  void step(std::span<float> params, std::span<const float> grad, uint64_t step,
            const MomentumAllreduce& allreduce) override {
    if (step < warmup_) {
      adamStep(params, grad, step);
      return;
    }
    GRADCOMP_CHECK_ARG(allreduce != nullptr, "1-bit Adam after warm-up needs the momentum all-reduce");
    auto &m = buffers_[0], &v = buffers_[1];
    checkSizes(params, grad, m.size());
    const float b1 = static_cast<float>(beta1_), lr = static_cast<float>(lr_), eps = static_cast<float>(eps_);
    // The variance froze at the end of warm-up, bias-corrected there once: the preconditioner is fixed.
    const float c2 = static_cast<float>(1 - repro::powInt(beta2_, warmup_));
    const float c1 = static_cast<float>(1 - repro::powInt(beta1_, step + 1));
    for (size_t i = 0; i < m.size(); ++i) m[i] = b1 * m[i] + (1 - b1) * grad[i];
    allreduce(m);  // compressed, with error feedback: every worker now holds the same momentum
    for (size_t i = 0; i < m.size(); ++i) params[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
  }

 private:
  uint64_t warmup_;
};

}  // namespace

std::unique_ptr<Optimizer> Optimizer::make(const std::string& text, size_t numParameters) {
  const CodecSpec spec = CodecSpec::parse(text);
  std::unique_ptr<Optimizer> o;
  if (spec.name() == "sgd") o = std::make_unique<Sgd>(spec, numParameters);
  else if (spec.name() == "adam") o = std::make_unique<Adam>(spec, numParameters);
  else if (spec.name() == "onebit-adam") o = std::make_unique<OneBitAdam>(spec, numParameters);
  else GRADCOMP_THROW(InvalidArgument, "unknown optimizer '", spec.name(), "' (sgd, adam, onebit-adam)");
  spec.checkAllUsed();
  return o;
}

void Optimizer::save(std::ostream& out) const {
  const auto put = [&](uint64_t v) { out.write(reinterpret_cast<const char*>(&v), sizeof v); };
  put(kOptimizerMagic);
  put(kind_.size());
  out.write(kind_.data(), static_cast<std::streamsize>(kind_.size()));
  put(buffers_.size());
  for (const auto& b : buffers_) {
    put(b.size());
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size() * sizeof(float)));
  }
}

void Optimizer::load(std::istream& in) {
  const auto get = [&]() {
    uint64_t v = 0;
    in.read(reinterpret_cast<char*>(&v), sizeof v);
    GRADCOMP_CHECK_ARG(in.gcount() == sizeof v, "optimizer state is truncated");
    return v;
  };
  GRADCOMP_CHECK_ARG(get() == kOptimizerMagic, "not an optimizer state (bad magic)");
  const uint64_t kindSize = get();
  GRADCOMP_CHECK_ARG(kindSize < 64, "optimizer state: kind of ", kindSize, " characters");
  std::string kind(kindSize, '\0');
  in.read(kind.data(), static_cast<std::streamsize>(kindSize));
  GRADCOMP_CHECK_ARG(kind == kind_, "optimizer state is for '", kind, "', this optimizer is '", kind_, "'");
  GRADCOMP_CHECK_ARG(get() == buffers_.size(), "optimizer state has the wrong number of buffers");
  for (auto& b : buffers_) {
    GRADCOMP_CHECK_ARG(get() == b.size(), "optimizer state is for a model of another size (", b.size(), " parameters here)");
    in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(b.size() * sizeof(float)));
    GRADCOMP_CHECK_ARG(static_cast<size_t>(in.gcount()) == b.size() * sizeof(float), "optimizer state is truncated");
  }
}

}  // namespace gradcomp
