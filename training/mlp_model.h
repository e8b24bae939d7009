// A ReLU multi-layer perceptron with a softmax cross-entropy head.
#pragma once

#include "training/model.h"

namespace gradcomp {

class MlpModel final : public Model {
 public:
  MlpModel(size_t inputs, const std::vector<size_t>& hidden, int classes);
  std::string name() const override;
  double lossAndGradient(const Batch& batch, std::span<float> grad, const GradientReady& ready) override;
  double loss(const Batch& batch) const override;
  Matrix outputs(const Matrix& x) const override;

 private:
  // Pre-activations of every layer (the last is the logits).
  std::vector<Matrix> forward(const Matrix& x) const;
  std::vector<size_t> widths_;               // inputs, hidden..., classes
  std::vector<size_t> weights_, biases_;     // tensor index per layer
};

}  // namespace gradcomp
