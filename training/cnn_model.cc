#include "training/cnn_model.h"
#include "training/reproducible_math.h"

#include "core/error.h"

namespace gradcomp {

CnnModel::CnnModel(size_t height, size_t width, size_t channels, size_t kernel, size_t hidden, int classes)
    : Model(classes), height_(height), width_(width), channels_(channels), kernel_(kernel), hidden_(hidden) {
  GRADCOMP_CHECK_ARG(kernel % 2 == 1, "cnn kernel must be odd for same padding, got ", kernel);
  GRADCOMP_CHECK_ARG(height >= 2 && width >= 2, "cnn needs images of at least 2x2, got ", height, "x", width);
  const size_t pooled = channels * (height / 2) * (width / 2);
  convWeight_ = addTensor("conv.weight", {kernel * kernel, channels}, kernel * kernel);
  convBias_ = addTensor("conv.bias", {channels}, 0);
  size_t headInputs = pooled;
  if (hidden > 0) {
    hiddenWeight_ = addTensor("hidden.weight", {pooled, hidden}, pooled);
    hiddenBias_ = addTensor("hidden.bias", {hidden}, 0);
    headInputs = hidden;
  }
  outWeight_ = addTensor("out.weight", {headInputs, static_cast<size_t>(classes)}, headInputs);
  outBias_ = addTensor("out.bias", {static_cast<size_t>(classes)}, 0);
  finishLayout();
}

std::string CnnModel::name() const {
  return "cnn:channels=" + std::to_string(channels_) + ",kernel=" + std::to_string(kernel_) +
         ",hidden=" + std::to_string(hidden_);
}

Matrix CnnModel::im2col(const Matrix& x) const {
  const auto n = x.rows();
  const auto h = static_cast<Eigen::Index>(height_), w = static_cast<Eigen::Index>(width_);
  const auto k = static_cast<Eigen::Index>(kernel_), pad = k / 2;
  Matrix patches = Matrix::Zero(n * h * w, k * k);
  for (Eigen::Index s = 0; s < n; ++s)
    for (Eigen::Index y = 0; y < h; ++y)
      for (Eigen::Index xx = 0; xx < w; ++xx) {
        const Eigen::Index row = (s * h + y) * w + xx;
        for (Eigen::Index dy = 0; dy < k; ++dy)
          for (Eigen::Index dx = 0; dx < k; ++dx) {
            const Eigen::Index sy = y + dy - pad, sx = xx + dx - pad;
            if (sy >= 0 && sy < h && sx >= 0 && sx < w) patches(row, dy * k + dx) = x(s, sy * w + sx);
          }
      }
  return patches;
}

CnnModel::Forward CnnModel::forward(const Matrix& x) const {
  GRADCOMP_CHECK_ARG(static_cast<size_t>(x.cols()) == height_ * width_, "input of ", x.cols(), " pixels for a ",
                     height_, "x", width_, " cnn");
  Forward f;
  const auto n = x.rows();
  const auto h = static_cast<Eigen::Index>(height_), w = static_cast<Eigen::Index>(width_);
  const auto c = static_cast<Eigen::Index>(channels_), ph = h / 2, pw = w / 2;
  f.patches = im2col(x);
  f.conv = repro::product(f.patches, tensor(parameters(), convWeight_));
  f.conv.rowwise() += tensor(parameters(), convBias_).col(0).transpose();
  f.pooled.resize(n, c * ph * pw);
  f.argmax.resize(static_cast<size_t>(n * c * ph * pw));
  for (Eigen::Index s = 0; s < n; ++s)
    for (Eigen::Index ch = 0; ch < c; ++ch)
      for (Eigen::Index py = 0; py < ph; ++py)
        for (Eigen::Index px = 0; px < pw; ++px) {
          // The first maximum of the window wins ties (deterministic backward).
          Eigen::Index best = (s * h + 2 * py) * w + 2 * px;
          for (Eigen::Index dy = 0; dy < 2; ++dy)
            for (Eigen::Index dx = 0; dx < 2; ++dx) {
              const Eigen::Index row = (s * h + 2 * py + dy) * w + 2 * px + dx;
              if (f.conv(row, ch) > f.conv(best, ch)) best = row;
            }
          const Eigen::Index col = (ch * ph + py) * pw + px;
          f.pooled(s, col) = std::max(f.conv(best, ch), 0.0f);  // ReLU commutes with max
          f.argmax[static_cast<size_t>(s * c * ph * pw + col)] = best;
        }
  const Matrix* head = &f.pooled;
  Matrix hiddenActivation;
  if (hidden_ > 0) {
    f.hidden = repro::product(f.pooled, tensor(parameters(), hiddenWeight_));
    f.hidden.rowwise() += tensor(parameters(), hiddenBias_).col(0).transpose();
    hiddenActivation = f.hidden.cwiseMax(0.0f);
    head = &hiddenActivation;
  }
  f.logits = repro::product(*head, tensor(parameters(), outWeight_));
  f.logits.rowwise() += tensor(parameters(), outBias_).col(0).transpose();
  return f;
}

Matrix CnnModel::outputs(const Matrix& x) const { return forward(x).logits; }

double CnnModel::loss(const Batch& batch) const { return softmaxCrossEntropy(outputs(batch.x), batch.labels, nullptr); }

double CnnModel::lossAndGradient(const Batch& batch, std::span<float> grad, const GradientReady& ready) {
  const Forward f = forward(batch.x);
  Matrix dz;
  const double l = softmaxCrossEntropy(f.logits, batch.labels, &dz);

  // Dense head.
  const Matrix headInput = hidden_ > 0 ? Matrix(f.hidden.cwiseMax(0.0f)) : f.pooled;
  tensor(grad, outBias_).col(0) = repro::columnSums(dz);
  announce(ready, outBias_);
  auto gOut = tensor(grad, outWeight_);
  repro::multiply(Matrix(headInput.transpose()), dz, gOut);
  announce(ready, outWeight_);
  Matrix dPooled = repro::productTransposedB(dz, tensor(parameters(), outWeight_));
  if (hidden_ > 0) {
    const Matrix dHidden = (f.hidden.array() > 0.0f).select(dPooled, 0.0f);
    tensor(grad, hiddenBias_).col(0) = repro::columnSums(dHidden);
    announce(ready, hiddenBias_);
    auto gHidden = tensor(grad, hiddenWeight_);
    repro::multiply(Matrix(f.pooled.transpose()), dHidden, gHidden);
    announce(ready, hiddenWeight_);
    dPooled = repro::productTransposedB(dHidden, tensor(parameters(), hiddenWeight_));
  }

  // Pool and ReLU: each pooled gradient goes to its window's maximum, if that maximum was positive.
  Matrix dConv = Matrix::Zero(f.conv.rows(), f.conv.cols());
  const auto n = batch.x.rows(), pooledPerSample = f.pooled.cols();
  const auto perChannel = pooledPerSample / static_cast<Eigen::Index>(channels_);
  for (Eigen::Index s = 0; s < n; ++s)
    for (Eigen::Index col = 0; col < pooledPerSample; ++col) {
      const Eigen::Index row = f.argmax[static_cast<size_t>(s * pooledPerSample + col)];
      const Eigen::Index ch = col / perChannel;
      if (f.conv(row, ch) > 0.0f) dConv(row, ch) += dPooled(s, col);
    }
  tensor(grad, convBias_).col(0) = repro::columnSums(dConv);
  announce(ready, convBias_);
  auto gConv = tensor(grad, convWeight_);
  repro::multiply(Matrix(f.patches.transpose()), dConv, gConv);
  announce(ready, convWeight_);
  return l;
}

}  // namespace gradcomp
