#include "training/linear_models.h"
#include "training/reproducible_math.h"

#include <cmath>

#include "core/error.h"

namespace gradcomp {

namespace {

double squaredError(const Matrix& out, const Batch& batch, Matrix* dOut) {
  const Matrix residual = out.col(0) - batch.targets;
  const auto n = static_cast<double>(out.rows());
  if (dOut) *dOut = residual / static_cast<float>(out.rows());
  return 0.5 * repro::squaredNorm(residual) / n;
}

// Mean log-loss of logits z against 0/1 labels, in the log(1 + e^-|z|) form: no overflow for any z.
double logLoss(const Matrix& z, const Batch& batch, Matrix* dz) {
  const auto n = z.rows();
  double loss = 0;
  if (dz) dz->resize(n, 1);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double v = z(i, 0);
    const int y = batch.labels[static_cast<size_t>(i)];
    GRADCOMP_CHECK_ARG(y == 0 || y == 1, "logistic regression label ", y, " is not 0 or 1");
    loss += std::max(v, 0.0) - v * y + repro::log(1.0 + repro::exp(-std::abs(v)));
    if (dz) (*dz)(i, 0) = static_cast<float>((1.0 / (1.0 + repro::exp(-v)) - y) / static_cast<double>(n));
  }
  return loss / static_cast<double>(n);
}

double crossEntropy(const Matrix& logits, const Batch& batch, Matrix* dLogits) {
  return softmaxCrossEntropy(logits, batch.labels, dLogits);
}

}  // namespace

LinearModel::LinearModel(std::string name, size_t inputs, size_t outputs, int numClasses, OutputLoss outputLoss)
    : Model(numClasses), name_(std::move(name)), outputLoss_(outputLoss) {
  weight_ = addTensor("weight", {inputs, outputs}, inputs);
  bias_ = addTensor("bias", {outputs}, 0);
  finishLayout();
}

std::unique_ptr<LinearModel> LinearModel::leastSquares(size_t inputs) {
  return std::unique_ptr<LinearModel>(new LinearModel("least-squares", inputs, 1, 0, squaredError));
}
std::unique_ptr<LinearModel> LinearModel::logistic(size_t inputs) {
  return std::unique_ptr<LinearModel>(new LinearModel("logistic", inputs, 1, 2, logLoss));
}
std::unique_ptr<LinearModel> LinearModel::softmax(size_t inputs, int classes) {
  return std::unique_ptr<LinearModel>(
      new LinearModel("softmax", inputs, static_cast<size_t>(classes), classes, crossEntropy));
}

Matrix LinearModel::outputs(const Matrix& x) const {
  GRADCOMP_CHECK_ARG(static_cast<size_t>(x.cols()) == layout_[weight_].shape[0], "input of ", x.cols(),
                     " features for a model of ", layout_[weight_].shape[0]);
  Matrix out = repro::product(x, tensor(parameters(), weight_));
  out.rowwise() += tensor(parameters(), bias_).col(0).transpose();
  return out;
}

double LinearModel::loss(const Batch& batch) const { return outputLoss_(outputs(batch.x), batch, nullptr); }

double LinearModel::lossAndGradient(const Batch& batch, std::span<float> grad, const GradientReady& ready) {
  Matrix dOut;
  const double l = outputLoss_(outputs(batch.x), batch, &dOut);
  tensor(grad, bias_).col(0) = repro::columnSums(dOut);
  announce(ready, bias_);
  auto g = tensor(grad, weight_);
  repro::multiply(Matrix(batch.x.transpose()), dOut, g);
  announce(ready, weight_);
  return l;
}

}  // namespace gradcomp
