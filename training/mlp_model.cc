#include "training/mlp_model.h"
#include "training/reproducible_math.h"

#include "core/error.h"

namespace gradcomp {

MlpModel::MlpModel(size_t inputs, const std::vector<size_t>& hidden, int classes) : Model(classes) {
  widths_.push_back(inputs);
  widths_.insert(widths_.end(), hidden.begin(), hidden.end());
  widths_.push_back(static_cast<size_t>(classes));
  for (size_t l = 0; l + 1 < widths_.size(); ++l) {
    weights_.push_back(addTensor("layer" + std::to_string(l) + ".weight", {widths_[l], widths_[l + 1]}, widths_[l]));
    biases_.push_back(addTensor("layer" + std::to_string(l) + ".bias", {widths_[l + 1]}, 0));
  }
  finishLayout();
}

std::string MlpModel::name() const {
  std::string s = "mlp:hidden=";
  for (size_t l = 1; l + 1 < widths_.size(); ++l) {
    if (l > 1) s += 'x';
    s += std::to_string(widths_[l]);
  }
  return s;
}

std::vector<Matrix> MlpModel::forward(const Matrix& x) const {
  GRADCOMP_CHECK_ARG(static_cast<size_t>(x.cols()) == widths_[0], "input of ", x.cols(), " features for an MLP of ",
                     widths_[0]);
  std::vector<Matrix> z;
  for (size_t l = 0; l < weights_.size(); ++l) {
    const Matrix& in = l == 0 ? x : z.back();
    Matrix out = l == 0 ? repro::product(in, tensor(parameters(), weights_[l]))
                        : repro::product(in.cwiseMax(0.0f), tensor(parameters(), weights_[l]));
    out.rowwise() += tensor(parameters(), biases_[l]).col(0).transpose();
    z.push_back(std::move(out));
  }
  return z;
}

Matrix MlpModel::outputs(const Matrix& x) const { return forward(x).back(); }

double MlpModel::loss(const Batch& batch) const { return softmaxCrossEntropy(outputs(batch.x), batch.labels, nullptr); }

double MlpModel::lossAndGradient(const Batch& batch, std::span<float> grad, const GradientReady& ready) {
  const auto z = forward(batch.x);
  Matrix dz;
  const double l = softmaxCrossEntropy(z.back(), batch.labels, &dz);
  for (size_t layer = weights_.size(); layer-- > 0;) {
    tensor(grad, biases_[layer]).col(0) = repro::columnSums(dz);
    announce(ready, biases_[layer]);
    if (layer == 0) {
      auto g = tensor(grad, weights_[0]);
      repro::multiply(Matrix(batch.x.transpose()), dz, g);
    } else {
      const Matrix activation = z[layer - 1].cwiseMax(0.0f);
      auto g = tensor(grad, weights_[layer]);
      repro::multiply(Matrix(activation.transpose()), dz, g);
    }
    // Announced before the layer below is computed: its all-reduce can start now.
    announce(ready, weights_[layer]);
    if (layer > 0) {
      // d loss / d z of the layer below: back through the weights, then through the ReLU.
      const Matrix below = repro::productTransposedB(dz, tensor(parameters(), weights_[layer]));
      dz = (z[layer - 1].array() > 0.0f).select(below, 0.0f);
    }
  }
  return l;
}

}  // namespace gradcomp
