#include "training/model.h"
#include "training/reproducible_math.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "compressors/codec_spec.h"
#include "core/error.h"
#include "training/cnn_model.h"
#include "training/linear_models.h"
#include "training/mlp_model.h"
#include "training/seeded_random.h"

namespace gradcomp {

Batch makeBatch(const Dataset& data, const std::vector<size_t>& rows) {
  Batch b;
  b.x.resize(static_cast<Eigen::Index>(rows.size()), data.features.cols());
  for (size_t i = 0; i < rows.size(); ++i) b.x.row(static_cast<Eigen::Index>(i)) = data.features.row(static_cast<Eigen::Index>(rows[i]));
  if (data.numClasses > 0) {
    for (size_t r : rows) b.labels.push_back(data.labels[r]);
  } else {
    b.targets.resize(static_cast<Eigen::Index>(rows.size()));
    for (size_t i = 0; i < rows.size(); ++i) b.targets(static_cast<Eigen::Index>(i)) = data.targets(static_cast<Eigen::Index>(rows[i]));
  }
  return b;
}

size_t Model::addTensor(std::string name, std::vector<size_t> shape, size_t fanIn) {
  fanIn_.push_back(fanIn);
  return layout_.add(std::move(name), std::move(shape));
}

void Model::initialize(uint64_t seed) {
  for (size_t t = 0; t < layout_.size(); ++t) {
    const auto& info = layout_[t];
    float* p = params_.data() + info.offset;
    if (fanIn_[t] == 0) {
      std::fill(p, p + info.size, 0.0f);
      continue;
    }
    // He initialisation: keeps ReLU activations at unit scale whatever the width.
    const float scale = std::sqrt(2.0f / static_cast<float>(fanIn_[t]));
    const SeededRandom rng(seed, RandomPurpose::Init, static_cast<uint32_t>(t));
    for (size_t i = 0; i < info.size; ++i) p[i] = scale * rng.normal(i);
  }
}

Eigen::Map<Matrix> Model::tensor(std::span<float> buffer, size_t index) const {
  const auto& t = layout_[index];
  GRADCOMP_CHECK_ARG(buffer.size() == params_.size(), "buffer of ", buffer.size(), " floats for a model of ", params_.size());
  const auto rows = static_cast<Eigen::Index>(t.shape.empty() ? 1 : t.shape[0]);
  return Eigen::Map<Matrix>(buffer.data() + t.offset, rows, static_cast<Eigen::Index>(t.size) / rows);
}

Eigen::Map<const Matrix> Model::tensor(std::span<const float> buffer, size_t index) const {
  const auto& t = layout_[index];
  GRADCOMP_CHECK_ARG(buffer.size() == params_.size(), "buffer of ", buffer.size(), " floats for a model of ", params_.size());
  const auto rows = static_cast<Eigen::Index>(t.shape.empty() ? 1 : t.shape[0]);
  return Eigen::Map<const Matrix>(buffer.data() + t.offset, rows, static_cast<Eigen::Index>(t.size) / rows);
}

namespace {

constexpr size_t kEvalBatch = 512;

template <typename Fn>
void forEachBatch(const Dataset& data, Fn&& fn) {
  for (size_t begin = 0; begin < data.size(); begin += kEvalBatch) {
    std::vector<size_t> rows(std::min(kEvalBatch, data.size() - begin));
    std::iota(rows.begin(), rows.end(), begin);
    fn(makeBatch(data, rows));
  }
}

}  // namespace

double Model::accuracy(const Dataset& data) const {
  GRADCOMP_CHECK_ARG(classifier(), "accuracy of a regression model (", name(), ")");
  size_t correct = 0;
  forEachBatch(data, [&](const Batch& b) {
    const Matrix out = outputs(b.x);
    for (Eigen::Index i = 0; i < out.rows(); ++i) {
      int predicted;
      if (out.cols() == 1) predicted = out(i, 0) > 0 ? 1 : 0;
      else predicted = static_cast<int>(repro::argmaxOfRow(out, i));
      correct += predicted == b.labels[static_cast<size_t>(i)];
    }
  });
  return static_cast<double>(correct) / static_cast<double>(data.size());
}

double Model::meanLoss(const Dataset& data) const {
  double total = 0;
  forEachBatch(data, [&](const Batch& b) { total += loss(b) * static_cast<double>(b.x.rows()); });
  return total / static_cast<double>(data.size());
}

double softmaxCrossEntropy(const Matrix& logits, const std::vector<int>& labels, Matrix* dLogits) {
  const auto n = logits.rows();
  GRADCOMP_CHECK_ARG(static_cast<size_t>(n) == labels.size(), n, " rows of logits for ", labels.size(), " labels");
  // Shift by the row maximum: exp never overflows.
  Matrix p = logits.colwise() - logits.rowwise().maxCoeff();  // the max is exact in any order
  for (Eigen::Index i = 0; i < p.size(); ++i) p.data()[i] = static_cast<float>(repro::exp(p.data()[i]));
  const Vector sums = repro::rowSums(p);
  double loss = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    const int y = labels[static_cast<size_t>(i)];
    GRADCOMP_CHECK_ARG(y >= 0 && y < logits.cols(), "label ", y, " outside 0..", logits.cols() - 1);
    p.row(i) /= sums(i);
    loss -= repro::log(std::max(static_cast<double>(p(i, y)), 1e-30));
  }
  if (dLogits) {
    *dLogits = p;
    for (Eigen::Index i = 0; i < n; ++i) (*dLogits)(i, labels[static_cast<size_t>(i)]) -= 1.0f;
    *dLogits /= static_cast<float>(n);
  }
  return loss / static_cast<double>(n);
}

namespace {

std::vector<size_t> parseSizes(const std::string& text, const char* what) {
  std::vector<size_t> sizes;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t x = text.find('x', pos);
    const std::string part = text.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    char* end = nullptr;
    const unsigned long long v = std::strtoull(part.c_str(), &end, 10);
    GRADCOMP_CHECK_ARG(!part.empty() && *end == '\0' && v > 0 && v <= (1u << 20), "bad ", what, " '", text,
                       "': expected sizes like 128x64");
    sizes.push_back(v);
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  return sizes;
}

}  // namespace

std::unique_ptr<Model> makeModel(const std::string& text, const Dataset& data) {
  const CodecSpec spec = CodecSpec::parse(text);
  std::unique_ptr<Model> model;
  const auto need = [&](bool classification) {
    GRADCOMP_CHECK_ARG((data.numClasses > 0) == classification, "model '", spec.name(), "' needs ",
                       classification ? "a classification" : "a regression", " data set; '", data.name, "' is not");
  };
  if (spec.name() == "least-squares") {
    need(false);
    model = LinearModel::leastSquares(data.inputs());
  } else if (spec.name() == "logistic") {
    need(true);
    GRADCOMP_CHECK_ARG(data.numClasses == 2, "logistic regression needs 2 classes; '", data.name, "' has ", data.numClasses);
    model = LinearModel::logistic(data.inputs());
  } else if (spec.name() == "softmax") {
    need(true);
    model = LinearModel::softmax(data.inputs(), data.numClasses);
  } else if (spec.name() == "mlp") {
    need(true);
    model = std::make_unique<MlpModel>(data.inputs(), parseSizes(spec.getString("hidden", "128x64"), "mlp hidden"),
                                       data.numClasses);
  } else if (spec.name() == "cnn") {
    need(true);
    size_t h = data.imageHeight, w = data.imageWidth;
    if (h == 0) {  // square images by default
      h = w = static_cast<size_t>(std::lround(std::sqrt(static_cast<double>(data.inputs()))));
      GRADCOMP_CHECK_ARG(h * w == data.inputs(), "cnn needs images: '", data.name, "' has ", data.inputs(),
                         " inputs, not a square and no image size");
    }
    const size_t hidden = spec.getUInt("hidden", 0, 0, 1u << 16);
    model = std::make_unique<CnnModel>(h, w, spec.getUInt("channels", 8, 1, 256), spec.getUInt("kernel", 3, 1, 15),
                                       hidden, data.numClasses);
  } else {
    GRADCOMP_THROW(InvalidArgument, "unknown model '", spec.name(), "' (least-squares, logistic, softmax, mlp, cnn)");
  }
  spec.checkAllUsed();
  return model;
}

}  // namespace gradcomp
