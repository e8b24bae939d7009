#include "training/linear_models.h"

#include <cmath>

#include "core/error.h"

namespace gradcomp {

LinearModel::LinearModel(size_t inputs, size_t outputs, int numClasses) : Model(numClasses) {
  weight_ = addTensor("weight", {inputs, outputs}, inputs);
  bias_ = addTensor("bias", {outputs}, 0);
  finishLayout();
}

Matrix LinearModel::outputs(const Matrix& x) const {
  GRADCOMP_CHECK_ARG(static_cast<size_t>(x.cols()) == layout_[weight_].shape[0], "input of ", x.cols(),
                     " features for a model of ", layout_[weight_].shape[0]);
  const auto w = tensor(parameters(), weight_);
  const auto b = tensor(parameters(), bias_);  // [outputs x 1]
  Matrix out = x * w;
  out.rowwise() += b.col(0).transpose();
  return out;
}

void LinearModel::backward(const Matrix& x, const Matrix& dOut, std::span<float> grad, const GradientReady& ready) const {
  tensor(grad, bias_).col(0) = dOut.colwise().sum().transpose();
  announce(ready, bias_);
  tensor(grad, weight_).noalias() = x.transpose() * dOut;
  announce(ready, weight_);
}

double LeastSquaresModel::lossAndGradient(const Batch& batch, std::span<float> grad, const GradientReady& ready) {
  const Matrix residual = outputs(batch.x).col(0) - batch.targets;
  backward(batch.x, residual / static_cast<float>(batch.x.rows()), grad, ready);
  return 0.5 * static_cast<double>(residual.squaredNorm()) / static_cast<double>(batch.x.rows());
}

double LeastSquaresModel::loss(const Batch& batch) const {
  return 0.5 * static_cast<double>((outputs(batch.x).col(0) - batch.targets).squaredNorm()) /
         static_cast<double>(batch.x.rows());
}

namespace {

// Mean log-loss of logits z against 0/1 labels; d loss / d z into dz if given. log(1 + e^-|z|) form:
// no overflow for any z.
double logLoss(const Matrix& z, const std::vector<int>& labels, Matrix* dz) {
  const auto n = z.rows();
  double loss = 0;
  if (dz) dz->resize(n, 1);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double v = z(i, 0);
    const int y = labels[static_cast<size_t>(i)];
    GRADCOMP_CHECK_ARG(y == 0 || y == 1, "logistic regression label ", y, " is not 0 or 1");
    loss += std::max(v, 0.0) - v * y + std::log1p(std::exp(-std::abs(v)));
    if (dz) (*dz)(i, 0) = static_cast<float>((1.0 / (1.0 + std::exp(-v)) - y) / static_cast<double>(n));
  }
  return loss / static_cast<double>(n);
}

}  // namespace

double LogisticModel::lossAndGradient(const Batch& batch, std::span<float> grad, const GradientReady& ready) {
  Matrix dz;
  const double l = logLoss(outputs(batch.x), batch.labels, &dz);
  backward(batch.x, dz, grad, ready);
  return l;
}

double LogisticModel::loss(const Batch& batch) const { return logLoss(outputs(batch.x), batch.labels, nullptr); }

double SoftmaxModel::lossAndGradient(const Batch& batch, std::span<float> grad, const GradientReady& ready) {
  Matrix dz;
  const double l = softmaxCrossEntropy(outputs(batch.x), batch.labels, &dz);
  backward(batch.x, dz, grad, ready);
  return l;
}

double SoftmaxModel::loss(const Batch& batch) const { return softmaxCrossEntropy(outputs(batch.x), batch.labels, nullptr); }

}  // namespace gradcomp
