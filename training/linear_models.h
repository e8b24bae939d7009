// The linear models: least squares (regression), logistic regression (2 classes) and softmax regression.
// Convex, so the synthetic problems have a known optimum to converge to.
#pragma once

#include "training/model.h"

namespace gradcomp {

// One weight column [inputs x outputs] and a bias [outputs]; the shared part of the three models.
class LinearModel : public Model {
 public:
  Matrix outputs(const Matrix& x) const override;

 protected:
  LinearModel(size_t inputs, size_t outputs, int numClasses);
  // Gradient of the mean loss given d loss / d outputs (already divided by the batch size).
  void backward(const Matrix& x, const Matrix& dOut, std::span<float> grad, const GradientReady& ready) const;
  size_t weight_ = 0, bias_ = 0;
};

class LeastSquaresModel final : public LinearModel {
 public:
  explicit LeastSquaresModel(size_t inputs) : LinearModel(inputs, 1, 0) {}
  std::string name() const override { return "least-squares"; }
  double lossAndGradient(const Batch& batch, std::span<float> grad, const GradientReady& ready) override;
  double loss(const Batch& batch) const override;
};

class LogisticModel final : public LinearModel {
 public:
  explicit LogisticModel(size_t inputs) : LinearModel(inputs, 1, 2) {}
  std::string name() const override { return "logistic"; }
  double lossAndGradient(const Batch& batch, std::span<float> grad, const GradientReady& ready) override;
  double loss(const Batch& batch) const override;
};

class SoftmaxModel final : public LinearModel {
 public:
  SoftmaxModel(size_t inputs, int classes) : LinearModel(inputs, static_cast<size_t>(classes), classes) {}
  std::string name() const override { return "softmax"; }
  double lossAndGradient(const Batch& batch, std::span<float> grad, const GradientReady& ready) override;
  double loss(const Batch& batch) const override;
};

}  // namespace gradcomp
