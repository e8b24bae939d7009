// A small convolutional network for single-channel images: conv k x k (same padding, as one matrix
// product over im2col patches) + ReLU + 2x2 max-pool, an optional hidden ReLU layer, and a dense
// softmax head.
#pragma once

#include "training/model.h"

namespace gradcomp {

class CnnModel final : public Model {
 public:
  CnnModel(size_t height, size_t width, size_t channels, size_t kernel, size_t hidden, int classes);
  std::string name() const override;
  double lossAndGradient(const Batch& batch, std::span<float> grad, const GradientReady& ready) override;
  double loss(const Batch& batch) const override;
  Matrix outputs(const Matrix& x) const override;

 private:
  struct Forward {
    Matrix patches;                 // (samples * H * W) x (k * k)
    Matrix conv;                    // pre-activation, (samples * H * W) x channels
    Matrix pooled;                  // samples x (channels * H/2 * W/2), after ReLU and pooling
    std::vector<Eigen::Index> argmax;  // row in `conv` of each pooled element (samples x pooled, row-major)
    Matrix hidden;                  // pre-activation of the hidden layer (if any)
    Matrix logits;
  };
  Forward forward(const Matrix& x) const;
  Matrix im2col(const Matrix& x) const;

  size_t height_, width_, channels_, kernel_, hidden_;
  size_t convWeight_, convBias_, hiddenWeight_ = 0, hiddenBias_ = 0, outWeight_, outBias_;
};

}  // namespace gradcomp
