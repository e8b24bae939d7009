// A model: named parameter tensors in one flat buffer (training/parameter_layout.h), a forward pass,
// and a backward pass that writes the gradient tensor by tensor in reverse layer order, announcing each
// finished tensor so the gradient reducer can start its all-reduce while backward goes on (overlap).
//
// Models (CPU, Eigen, fp32), built by makeModel(spec, data):
//   least-squares        y = x.w + b, loss 1/2 mean (y - t)^2 (known optimum on generated data)
//   logistic             binary logistic regression, mean log-loss
//   softmax              multinomial logistic regression
//   mlp:hidden=128x64    ReLU MLP, softmax cross-entropy
//   cnn:channels=8,kernel=3,hidden=0
//                        conv (same padding, im2col) + ReLU + 2x2 max-pool + dense (+ optional hidden
//                        ReLU layer) on square or given-size single-channel images
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "training/dataset.h"
#include "training/parameter_layout.h"

namespace gradcomp {

// Called with a tensor's index when its gradient is final.
using GradientReady = std::function<void(size_t tensorIndex)>;

struct Batch {
  Matrix x;                 // samples x inputs
  std::vector<int> labels;  // classification
  Vector targets;           // regression
};
Batch makeBatch(const Dataset& data, const std::vector<size_t>& rows);

class Model {
 public:
  virtual ~Model() = default;
  virtual std::string name() const = 0;
  bool classifier() const { return numClasses_ > 0; }

  const ParameterLayout& layout() const { return layout_; }
  std::span<float> parameters() { return params_; }
  std::span<const float> parameters() const { return params_; }
  size_t numParameters() const { return params_.size(); }

  // Seeded initialisation (He / Glorot-style normal scaled by fan-in; biases zero).
  void initialize(uint64_t seed);

  // Mean loss over the batch; the gradient of that mean into `grad` (numParameters() elements). Calls
  // ready(t) for each tensor as soon as its gradient is written, in backward order.
  virtual double lossAndGradient(const Batch& batch, std::span<float> grad, const GradientReady& ready) = 0;
  double lossAndGradient(const Batch& batch, std::span<float> grad) { return lossAndGradient(batch, grad, nullptr); }
  // Mean loss without gradients.
  virtual double loss(const Batch& batch) const = 0;
  // Class scores (samples x classes; one column of logits for the binary and regression models).
  virtual Matrix outputs(const Matrix& x) const = 0;

  // Share of correct predictions (classifiers) on the whole data set, in batches.
  double accuracy(const Dataset& data) const;
  // Mean loss on the whole data set, in batches.
  double meanLoss(const Dataset& data) const;

 protected:
  explicit Model(int numClasses) : numClasses_(numClasses) {}
  // Adds a tensor; fanIn scales its initialisation (0: zeros).
  size_t addTensor(std::string name, std::vector<size_t> shape, size_t fanIn);
  void finishLayout() { params_.assign(layout_.totalElements(), 0.0f); }
  Eigen::Map<Matrix> tensor(std::span<float> buffer, size_t index) const;
  Eigen::Map<const Matrix> tensor(std::span<const float> buffer, size_t index) const;
  static void announce(const GradientReady& ready, size_t index) {
    if (ready) ready(index);
  }

  int numClasses_;
  ParameterLayout layout_;
  std::vector<size_t> fanIn_;
  std::vector<float> params_;
};

// Mean softmax cross-entropy of logits (samples x classes); writes d loss / d logits if dLogits is given.
double softmaxCrossEntropy(const Matrix& logits, const std::vector<int>& labels, Matrix* dLogits);

std::unique_ptr<Model> makeModel(const std::string& spec, const Dataset& data);

}  // namespace gradcomp
