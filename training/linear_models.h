// The linear models: least squares (regression), logistic regression (2 classes) and softmax regression.
// Convex, so the synthetic problems have a known optimum to converge to. One class: outputs = x W + b,
// and the model's loss on the outputs (with its gradient) is the only difference between the three.
#pragma once

#include "training/model.h"

namespace gradcomp {

class LinearModel final : public Model {
 public:
  // Mean loss of the outputs (samples x outputs) on a batch; d loss / d outputs into dOut if given.
  using OutputLoss = double (*)(const Matrix& outputs, const Batch& batch, Matrix* dOut);

  static std::unique_ptr<LinearModel> leastSquares(size_t inputs);
  static std::unique_ptr<LinearModel> logistic(size_t inputs);
  static std::unique_ptr<LinearModel> softmax(size_t inputs, int classes);

  std::string name() const override { return name_; }
  double lossAndGradient(const Batch& batch, std::span<float> grad, const GradientReady& ready) override;
  double loss(const Batch& batch) const override;
  Matrix outputs(const Matrix& x) const override;

 private:
  LinearModel(std::string name, size_t inputs, size_t outputs, int numClasses, OutputLoss outputLoss);
  std::string name_;
  OutputLoss outputLoss_;
  size_t weight_ = 0, bias_ = 0;
};

}  // namespace gradcomp
