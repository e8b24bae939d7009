// Data sets in memory (features as an Eigen matrix, one row per sample), the train/test split, the
// split across ranks (iid or non-iid by label) and the loaders: the digits CSV that scripts/setup
// extracts from scikit-learn, IDX (MNIST format) files, and generated problems with known answers.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

namespace gradcomp {

using Matrix = Eigen::MatrixXf;  // column-major; rows are samples
using Vector = Eigen::VectorXf;

struct Dataset {
  std::string name;
  Matrix features;          // samples x inputs
  std::vector<int> labels;  // classification (numClasses > 0)
  Vector targets;           // regression (numClasses == 0)
  int numClasses = 0;
  // Image geometry when the features are an image (the CNN needs it); 0 otherwise.
  size_t imageHeight = 0, imageWidth = 0;

  size_t size() const { return static_cast<size_t>(features.rows()); }
  size_t inputs() const { return static_cast<size_t>(features.cols()); }
  Dataset subset(const std::vector<size_t>& rows) const;
};

struct DataSplit {
  Dataset train, test;
};

// A seeded shuffle, then the last testFraction of the samples as the test set.
DataSplit splitTrainTest(const Dataset& all, double testFraction, uint64_t seed);

enum class Partition { Iid, NonIidByLabel };
Partition parsePartition(const std::string& name);

// The rows of `data` that rank `rank` of `ranks` trains on. Iid: a seeded shuffle dealt round-robin.
// Non-iid: sorted by label (seeded order inside a label), then cut into `ranks` contiguous pieces, so
// each rank sees few classes (the setting of federated-learning papers).
std::vector<size_t> shardRows(const Dataset& data, int rank, int ranks, Partition partition, uint64_t seed);

// Loaders. Each validates the file and throws InvalidArgument naming the file and the problem.
Dataset loadDigitsCsv(const std::string& path);  // 64 pixels (0..16) + label per line, scaled to [0, 1]
Dataset loadIdx(const std::string& imagesPath, const std::string& labelsPath);  // MNIST format, /255
void writeIdx(const std::string& imagesPath, const std::string& labelsPath, const std::vector<uint8_t>& pixels,
              const std::vector<uint8_t>& labels, uint32_t rows, uint32_t cols);

// y = X w* + b* exactly (no noise), X ~ N(0, 1): the least-squares optimum is (w*, b*) with loss 0.
Dataset makeLeastSquares(size_t samples, size_t inputs, uint64_t seed, std::vector<float>* optimum = nullptr);
// Two classes separated by a random hyperplane, with `flip` of the labels flipped.
Dataset makeLogistic(size_t samples, size_t inputs, uint64_t seed, double flip = 0.05);
// `classes` Gaussian blobs in `inputs` dimensions: a synthetic multi-class problem of any size.
Dataset makeBlobs(size_t samples, size_t inputs, int classes, uint64_t seed);

// "digits" (data/digits.csv), "digits:path=FILE", "idx:images=FILE,labels=FILE",
// "least-squares:n=2048,d=32", "logistic:n=2048,d=32", "blobs:n=4096,d=256,classes=10".
Dataset loadDataset(const std::string& spec, const std::string& dataDir);

}  // namespace gradcomp
