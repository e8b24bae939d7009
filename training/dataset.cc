#include "training/dataset.h"
#include "training/reproducible_math.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "compressors/codec_spec.h"
#include "core/error.h"
#include "training/seeded_random.h"

namespace gradcomp {

Dataset Dataset::subset(const std::vector<size_t>& rows) const {
  Dataset out;
  out.name = name;
  out.numClasses = numClasses;
  out.imageHeight = imageHeight;
  out.imageWidth = imageWidth;
  out.features.resize(static_cast<Eigen::Index>(rows.size()), features.cols());
  if (numClasses > 0) out.labels.resize(rows.size());
  else out.targets.resize(static_cast<Eigen::Index>(rows.size()));
  for (size_t i = 0; i < rows.size(); ++i) {
    GRADCOMP_CHECK_ARG(rows[i] < size(), "row ", rows[i], " out of range for data set of ", size(), " samples");
    const auto r = static_cast<Eigen::Index>(rows[i]);
    out.features.row(static_cast<Eigen::Index>(i)) = features.row(r);
    if (numClasses > 0) out.labels[i] = labels[rows[i]];
    else out.targets(static_cast<Eigen::Index>(i)) = targets(r);
  }
  return out;
}

namespace {

// A seeded permutation of 0..n-1 (Fisher-Yates driven by the counter-based stream).
std::vector<size_t> seededPermutation(size_t n, uint64_t seed, RandomPurpose purpose, uint32_t index) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  const SeededRandom rng(seed, purpose, index);
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i, static_cast<uint32_t>(i))]);
  return order;
}

}  // namespace

DataSplit splitTrainTest(const Dataset& all, double testFraction, uint64_t seed) {
  GRADCOMP_CHECK_ARG(testFraction > 0 && testFraction < 1, "test fraction must be in (0, 1), got ", testFraction);
  const auto order = seededPermutation(all.size(), seed, RandomPurpose::Split, 0);
  const size_t numTest = static_cast<size_t>(std::llround(testFraction * static_cast<double>(all.size())));
  GRADCOMP_CHECK_ARG(numTest > 0 && numTest < all.size(), "data set '", all.name, "' of ", all.size(),
                     " samples is too small to split with test fraction ", testFraction);
  const std::vector<size_t> train(order.begin(), order.end() - static_cast<std::ptrdiff_t>(numTest));
  const std::vector<size_t> test(order.end() - static_cast<std::ptrdiff_t>(numTest), order.end());
  return {all.subset(train), all.subset(test)};
}

Partition parsePartition(const std::string& name) {
  if (name == "iid") return Partition::Iid;
  if (name == "noniid" || name == "non-iid") return Partition::NonIidByLabel;
  GRADCOMP_THROW(InvalidArgument, "unknown partition '", name, "' (iid, noniid)");
}

std::vector<size_t> shardRows(const Dataset& data, int rank, int ranks, Partition partition, uint64_t seed) {
  GRADCOMP_CHECK_ARG(ranks > 0 && rank >= 0 && rank < ranks, "rank ", rank, " of ", ranks);
  GRADCOMP_CHECK_ARG(data.size() >= static_cast<size_t>(ranks), "data set '", data.name, "' has ", data.size(),
                     " samples, fewer than the ", ranks, " ranks");
  auto order = seededPermutation(data.size(), seed, RandomPurpose::Shard, 0);
  std::vector<size_t> mine;
  if (partition == Partition::Iid) {
    for (size_t i = static_cast<size_t>(rank); i < order.size(); i += static_cast<size_t>(ranks)) mine.push_back(order[i]);
  } else {
    GRADCOMP_CHECK_ARG(data.numClasses > 0, "non-iid partition needs labels; '", data.name, "' is a regression set");
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return data.labels[a] < data.labels[b]; });
    const size_t begin = order.size() * static_cast<size_t>(rank) / static_cast<size_t>(ranks);
    const size_t end = order.size() * static_cast<size_t>(rank + 1) / static_cast<size_t>(ranks);
    mine.assign(order.begin() + static_cast<std::ptrdiff_t>(begin), order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return mine;
}

Dataset loadDigitsCsv(const std::string& path) {
  std::ifstream in(path);
  GRADCOMP_CHECK_ARG(in.good(), "cannot open digits file '", path,
                     "' (scripts/setup extracts it from scikit-learn into data/digits.csv)");
  std::vector<std::vector<float>> rows;
  std::vector<int> labels;
  std::string line;
  size_t lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    if (line.empty()) continue;
    std::stringstream ss(line);
    std::string cell;
    std::vector<float> values;
    while (std::getline(ss, cell, ',')) {
      char* end = nullptr;
      const float v = std::strtof(cell.c_str(), &end);
      GRADCOMP_CHECK_ARG(end != cell.c_str() && std::isfinite(v), path, ":", lineNo, ": not a number: '", cell, "'");
      values.push_back(v);
    }
    GRADCOMP_CHECK_ARG(values.size() == 65, path, ":", lineNo, ": expected 64 pixels and a label, got ",
                       values.size(), " values");
    const float label = values.back();
    GRADCOMP_CHECK_ARG(label >= 0 && label <= 9 && label == std::floor(label), path, ":", lineNo, ": bad label ", label);
    for (size_t i = 0; i < 64; ++i)
      GRADCOMP_CHECK_ARG(values[i] >= 0 && values[i] <= 16, path, ":", lineNo, ": pixel ", i, " = ", values[i],
                         " outside 0..16");
    values.pop_back();
    rows.push_back(std::move(values));
    labels.push_back(static_cast<int>(label));
  }
  GRADCOMP_CHECK_ARG(!rows.empty(), "digits file '", path, "' has no samples");
  Dataset d;
  d.name = "digits";
  d.numClasses = 10;
  d.imageHeight = d.imageWidth = 8;
  d.features.resize(static_cast<Eigen::Index>(rows.size()), 64);
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t c = 0; c < 64; ++c)
      d.features(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = rows[r][c] / 16.0f;
  d.labels = std::move(labels);
  return d;
}

namespace {

uint32_t readBigEndian32(std::istream& in, const std::string& path, const char* what) {
  unsigned char b[4];
  in.read(reinterpret_cast<char*>(b), 4);
  GRADCOMP_CHECK_ARG(in.gcount() == 4, "IDX file '", path, "' is truncated in its header (", what, ")");
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

void writeBigEndian32(std::ostream& out, uint32_t v) {
  const unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  out.write(reinterpret_cast<const char*>(b), 4);
}

// Reads an unsigned-byte IDX file with `dims` dimensions; returns the sizes and the bytes.
std::vector<uint8_t> readIdxBytes(const std::string& path, uint32_t dims, std::vector<uint32_t>& sizes) {
  std::ifstream in(path, std::ios::binary);
  GRADCOMP_CHECK_ARG(in.good(), "cannot open IDX file '", path, "'");
  const uint32_t magic = readBigEndian32(in, path, "magic");
  GRADCOMP_CHECK_ARG((magic >> 8) == 0x08, "IDX file '", path, "': element type 0x", std::hex, (magic >> 8) & 0xff,
                     " is not unsigned byte (0x08), or the magic number ", magic, " is not IDX");
  GRADCOMP_CHECK_ARG((magic & 0xff) == dims, "IDX file '", path, "' has ", magic & 0xff, " dimensions, expected ", dims);
  uint64_t total = 1;
  sizes.clear();
  for (uint32_t i = 0; i < dims; ++i) {
    sizes.push_back(readBigEndian32(in, path, "dimension"));
    total *= sizes.back();
    GRADCOMP_CHECK_ARG(total <= (uint64_t{1} << 34), "IDX file '", path, "' claims ", total, " elements");
  }
  std::vector<uint8_t> bytes(total);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(total));
  GRADCOMP_CHECK_ARG(static_cast<uint64_t>(in.gcount()) == total, "IDX file '", path, "' is truncated: header says ",
                     total, " bytes of data, file has ", in.gcount());
  in.peek();
  GRADCOMP_CHECK_ARG(in.eof(), "IDX file '", path, "' has bytes after the data its header describes");
  return bytes;
}

}  // namespace

Dataset loadIdx(const std::string& imagesPath, const std::string& labelsPath) {
  std::vector<uint32_t> imageSizes, labelSizes;
  const auto pixels = readIdxBytes(imagesPath, 3, imageSizes);
  const auto labels = readIdxBytes(labelsPath, 1, labelSizes);
  GRADCOMP_CHECK_ARG(imageSizes[0] == labelSizes[0], "IDX images '", imagesPath, "' hold ", imageSizes[0],
                     " samples but labels '", labelsPath, "' hold ", labelSizes[0]);
  GRADCOMP_CHECK_ARG(imageSizes[0] > 0, "IDX file '", imagesPath, "' has no samples");
  Dataset d;
  d.name = "idx";
  d.imageHeight = imageSizes[1];
  d.imageWidth = imageSizes[2];
  const size_t n = imageSizes[0], pixelsPerImage = size_t{imageSizes[1]} * imageSizes[2];
  d.features.resize(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(pixelsPerImage));
  for (size_t i = 0; i < n; ++i) {
    GRADCOMP_CHECK_ARG(labels[i] <= 9, "IDX labels '", labelsPath, "': label ", int{labels[i]}, " at sample ", i,
                       " is not a digit 0..9");
    d.labels.push_back(labels[i]);
    for (size_t p = 0; p < pixelsPerImage; ++p)
      d.features(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(p)) = pixels[i * pixelsPerImage + p] / 255.0f;
  }
  d.numClasses = 10;
  return d;
}

void writeIdx(const std::string& imagesPath, const std::string& labelsPath, const std::vector<uint8_t>& pixels,
              const std::vector<uint8_t>& labels, uint32_t rows, uint32_t cols) {
  GRADCOMP_CHECK_ARG(pixels.size() == labels.size() * rows * cols, "writeIdx: ", pixels.size(), " pixels for ",
                     labels.size(), " images of ", rows, "x", cols);
  std::ofstream img(imagesPath, std::ios::binary), lab(labelsPath, std::ios::binary);
  GRADCOMP_CHECK_ARG(img.good() && lab.good(), "cannot write IDX files '", imagesPath, "', '", labelsPath, "'");
  writeBigEndian32(img, 0x00000803);
  writeBigEndian32(img, static_cast<uint32_t>(labels.size()));
  writeBigEndian32(img, rows);
  writeBigEndian32(img, cols);
  img.write(reinterpret_cast<const char*>(pixels.data()), static_cast<std::streamsize>(pixels.size()));
  writeBigEndian32(lab, 0x00000801);
  writeBigEndian32(lab, static_cast<uint32_t>(labels.size()));
  lab.write(reinterpret_cast<const char*>(labels.data()), static_cast<std::streamsize>(labels.size()));
}

namespace {

Matrix normalMatrix(size_t rows, size_t cols, uint64_t seed, uint32_t index) {
  const SeededRandom rng(seed, RandomPurpose::Data, index);
  Matrix m(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) m(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = rng.normal(r * cols + c);
  return m;
}

}  // namespace

Dataset makeLeastSquares(size_t samples, size_t inputs, uint64_t seed, std::vector<float>* optimum) {
  Dataset d;
  d.name = "least-squares";
  d.features = normalMatrix(samples, inputs, seed, 0);
  const Matrix w = normalMatrix(inputs + 1, 1, seed, 1);  // w* then b*
  d.targets = repro::product(d.features, w.topRows(static_cast<Eigen::Index>(inputs)));
  d.targets.array() += w(static_cast<Eigen::Index>(inputs), 0);
  if (optimum) optimum->assign(w.data(), w.data() + w.size());
  return d;
}

Dataset makeLogistic(size_t samples, size_t inputs, uint64_t seed, double flip) {
  Dataset d;
  d.name = "logistic";
  d.numClasses = 2;
  d.features = normalMatrix(samples, inputs, seed, 0);
  const Matrix w = normalMatrix(inputs, 1, seed, 1);
  const Vector score = repro::product(d.features, w);
  const SeededRandom rng(seed, RandomPurpose::Labels, 0);
  for (size_t i = 0; i < samples; ++i) {
    int label = score(static_cast<Eigen::Index>(i)) > 0 ? 1 : 0;
    if (rng.uniform(i) < flip) label = 1 - label;
    d.labels.push_back(label);
  }
  return d;
}

Dataset makeBlobs(size_t samples, size_t inputs, int classes, uint64_t seed) {
  GRADCOMP_CHECK_ARG(classes >= 2, "blobs need at least 2 classes, got ", classes);
  Dataset d;
  d.name = "blobs";
  d.numClasses = classes;
  const Matrix centers = normalMatrix(static_cast<size_t>(classes), inputs, seed, 1);
  d.features = normalMatrix(samples, inputs, seed, 0);
  const SeededRandom rng(seed, RandomPurpose::Labels, 0);
  for (size_t i = 0; i < samples; ++i) {
    const int label = static_cast<int>(rng.below(i, static_cast<uint32_t>(classes)));
    d.labels.push_back(label);
    d.features.row(static_cast<Eigen::Index>(i)) += 0.5f * centers.row(label);
  }
  return d;
}

Dataset loadDataset(const std::string& text, const std::string& dataDir) {
  const CodecSpec spec = CodecSpec::parse(text);
  Dataset d;
  if (spec.name() == "digits") {
    d = loadDigitsCsv(spec.getString("path", dataDir + "/digits.csv"));
  } else if (spec.name() == "idx") {
    GRADCOMP_CHECK_ARG(spec.has("images") && spec.has("labels"), "dataset 'idx' needs images=FILE,labels=FILE");
    d = loadIdx(spec.getString("images", ""), spec.getString("labels", ""));
  } else if (spec.name() == "least-squares") {
    d = makeLeastSquares(spec.getUInt("n", 2048, 2, 1u << 24), spec.getUInt("d", 32, 1, 1u << 16),
                         spec.getUInt("seed", 1, 0, UINT64_MAX));
  } else if (spec.name() == "logistic") {
    d = makeLogistic(spec.getUInt("n", 2048, 2, 1u << 24), spec.getUInt("d", 32, 1, 1u << 16),
                     spec.getUInt("seed", 1, 0, UINT64_MAX), spec.getDouble("flip", 0.05, -1e-9, 0.5));
  } else if (spec.name() == "blobs") {
    d = makeBlobs(spec.getUInt("n", 4096, 2, 1u << 24), spec.getUInt("d", 256, 1, 1u << 16),
                  static_cast<int>(spec.getUInt("classes", 10, 2, 1000)), spec.getUInt("seed", 1, 0, UINT64_MAX));
  } else {
    GRADCOMP_THROW(InvalidArgument, "unknown dataset '", spec.name(), "' (digits, idx, least-squares, logistic, blobs)");
  }
  spec.checkAllUsed();
  return d;
}

}  // namespace gradcomp
