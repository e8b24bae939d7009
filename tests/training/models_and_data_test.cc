// Models (backward against finite differences, convergence to a known optimum), data loaders (digits
// CSV, IDX) with their bad-input errors, the rank split and the batch sampler.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "core/error.h"
#include "training/batch_sampler.h"
#include "training/dataset.h"
#include "training/model.h"
#include "training/optimizer.h"

namespace gradcomp {
namespace {

std::string tempPath(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("gradcomp_training_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::vector<size_t> firstRows(size_t n) {
  std::vector<size_t> rows(n);
  std::iota(rows.begin(), rows.end(), size_t{0});
  return rows;
}

// Central differences of the float loss, |analytic - numeric| <= 2e-3 + 2e-2 |numeric| for every
// parameter. A coordinate whose step crosses a ReLU / max-pool kink is recognised by the central
// differences at h and h/2 disagreeing (for a smooth loss they agree to O(h^2)) and skipped; at most
// a tenth may be.
void expectGradientMatchesFiniteDifferences(Model& model, const Batch& batch) {
  std::vector<float> grad(model.numParameters());
  model.lossAndGradient(batch, grad);
  auto params = model.parameters();
  const auto central = [&](size_t i, float h) {
    const float original = params[i];
    params[i] = original + h;
    const double plus = model.loss(batch);
    params[i] = original - h;
    const double minus = model.loss(batch);
    params[i] = original;
    return (plus - minus) / (2.0 * h);
  };
  size_t checked = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const double numeric = central(i, 1e-3f), finer = central(i, 5e-4f);
    if (std::abs(numeric - finer) > 2e-3 + 0.02 * std::abs(numeric)) continue;  // a kink inside the step
    EXPECT_NEAR(grad[i], numeric, 2e-3 + 2e-2 * std::abs(numeric)) << model.name() << " parameter " << i;
    ++checked;
  }
  EXPECT_GE(checked * 10, params.size() * 9) << "too many coordinates skipped as kinks";
}

TEST(Models, BackwardMatchesFiniteDifferencesForEveryModel) {
  const Dataset blobs = makeBlobs(16, 16, 3, 5);  // 16 inputs = 4x4 images for the CNN
  const Dataset regression = makeLeastSquares(16, 6, 5);
  const Dataset binary = makeLogistic(16, 6, 5, 0.1);
  struct Case {
    std::string spec;
    const Dataset* data;
  };
  for (const Case& c : {Case{"least-squares", &regression}, Case{"logistic", &binary}, Case{"softmax", &blobs},
                        Case{"mlp:hidden=7x5", &blobs}, Case{"cnn:channels=3,kernel=3", &blobs},
                        Case{"cnn:channels=2,kernel=3,hidden=5", &blobs}}) {
    SCOPED_TRACE(c.spec);
    auto model = makeModel(c.spec, *c.data);
    model->initialize(3);
    // Non-zero biases too, so their gradients are exercised away from the initial point.
    for (auto& p : model->parameters()) p += 0.01f;
    expectGradientMatchesFiniteDifferences(*model, makeBatch(*c.data, firstRows(8)));
  }
}

TEST(Models, BackwardAnnouncesEveryTensorOnceInReverseOrder) {
  const Dataset blobs = makeBlobs(8, 16, 3, 5);
  for (const char* spec : {"softmax", "mlp:hidden=7x5", "cnn:channels=2,kernel=3,hidden=4"}) {
    auto model = makeModel(spec, blobs);
    model->initialize(1);
    std::vector<float> grad(model->numParameters());
    std::vector<size_t> order;
    model->lossAndGradient(makeBatch(blobs, firstRows(8)), grad, [&](size_t t) { order.push_back(t); });
    ASSERT_EQ(order.size(), model->layout().size()) << spec;
    EXPECT_EQ(std::set<size_t>(order.begin(), order.end()).size(), order.size()) << spec;
    // The last layer's tensors come first: the reducer's buckets follow this order.
    EXPECT_GE(order.front(), model->layout().size() - 2) << spec;
    EXPECT_LE(order.back(), 1u) << spec;
  }
}

TEST(Models, LeastSquaresConvergesToTheKnownOptimum) {
  std::vector<float> optimum;
  const Dataset data = makeLeastSquares(256, 8, 11, &optimum);
  auto model = makeModel("least-squares", data);
  model->initialize(2);
  auto sgd = Optimizer::make("sgd:lr=0.1,momentum=0.5", model->numParameters());
  std::vector<float> grad(model->numParameters());
  const Batch all = makeBatch(data, firstRows(256));
  for (uint64_t step = 0; step < 500; ++step) {
    model->lossAndGradient(all, grad);
    sgd->step(model->parameters(), grad, step, {});
  }
  ASSERT_EQ(optimum.size(), model->numParameters());  // weights then bias: the model's layout
  for (size_t i = 0; i < optimum.size(); ++i) EXPECT_NEAR(model->parameters()[i], optimum[i], 1e-4) << i;
  EXPECT_LT(model->loss(all), 1e-8);
}

TEST(Models, LogisticRegressionLearnsTheSeparatingHyperplane) {
  const Dataset data = makeLogistic(2000, 10, 4, 0.0);
  const DataSplit split = splitTrainTest(data, 0.25, 4);
  auto model = makeModel("logistic", split.train);
  model->initialize(1);
  auto adam = Optimizer::make("adam:lr=0.05", model->numParameters());
  std::vector<float> grad(model->numParameters());
  const BatchSampler sampler(firstRows(split.train.size()), 64, 1, 0);
  for (uint64_t step = 0; step < 400; ++step) {
    model->lossAndGradient(makeBatch(split.train, sampler.batch(step)), grad);
    adam->step(model->parameters(), grad, step, {});
  }
  EXPECT_GE(model->accuracy(split.test), 0.97);  // noiseless labels: a linear model separates them
}

TEST(Models, UnknownModelsAndMismatchedDataAreRefusedByName) {
  const Dataset blobs = makeBlobs(8, 10, 3, 1);
  const Dataset regression = makeLeastSquares(8, 4, 1);
  EXPECT_THROW(makeModel("transformer", blobs), InvalidArgument);
  EXPECT_THROW(makeModel("mlp:hidden=12xx3", blobs), InvalidArgument);
  EXPECT_THROW(makeModel("mlp:width=3", blobs), InvalidArgument);  // unknown parameter
  EXPECT_THROW(makeModel("least-squares", blobs), InvalidArgument);
  EXPECT_THROW(makeModel("softmax", regression), InvalidArgument);
  EXPECT_THROW(makeModel("logistic", blobs), InvalidArgument);   // 3 classes
  EXPECT_THROW(makeModel("cnn", blobs), InvalidArgument);        // 10 inputs: not an image
  try {
    makeModel("cnn:kernel=4", makeBlobs(8, 16, 3, 1));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("odd"), std::string::npos) << e.what();
  }
}

TEST(Data, DigitsCsvIsParsedAndBadFilesAreNamed) {
  const std::string good = tempPath("digits_good.csv");
  {
    std::ofstream out(good);
    for (int r = 0; r < 3; ++r) {
      for (int i = 0; i < 64; ++i) out << (i + r) % 17 << ",";
      out << r << "\n";
    }
  }
  const Dataset d = loadDigitsCsv(good);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d.inputs(), 64u);
  EXPECT_EQ(d.labels, (std::vector<int>{0, 1, 2}));
  EXPECT_FLOAT_EQ(d.features(1, 15), 16.0f / 16.0f);  // (15 + 1) % 17 = 16 -> 1.0
  EXPECT_EQ(d.imageHeight, 8u);

  const auto expectError = [](const std::string& content, const std::string& needle) {
    const std::string path = tempPath("digits_bad.csv");
    std::ofstream(path) << content;
    try {
      loadDigitsCsv(path);
      FAIL() << "accepted: " << content.substr(0, 40);
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  std::string row;
  for (int i = 0; i < 64; ++i) row += "1,";
  expectError(row + "3,4\n", "64 pixels and a label");
  expectError(row + "12\n", "bad label");
  expectError("17," + row.substr(2) + "3\n", "outside 0..16");
  expectError("x," + row.substr(2) + "3\n", "not a number");
  expectError("", "no samples");
  EXPECT_THROW(loadDigitsCsv(tempPath("missing.csv")), InvalidArgument);
}

TEST(Data, IdxRoundTripAndBadFilesAreNamed) {
  const std::string images = tempPath("imgs.idx"), labels = tempPath("labels.idx");
  std::vector<uint8_t> pixels(5 * 3 * 4), y = {0, 9, 3, 3, 7};
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7);
  writeIdx(images, labels, pixels, y, 3, 4);
  const Dataset d = loadIdx(images, labels);
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(d.inputs(), 12u);
  EXPECT_EQ(d.imageHeight, 3u);
  EXPECT_EQ(d.imageWidth, 4u);
  EXPECT_EQ(d.labels, (std::vector<int>{0, 9, 3, 3, 7}));
  EXPECT_FLOAT_EQ(d.features(2, 5), static_cast<float>(static_cast<uint8_t>((2 * 12 + 5) * 7)) / 255.0f);
  // The CNN takes the geometry from the file.
  EXPECT_NO_THROW(makeModel("cnn:channels=2", d));

  const auto bytesOf = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string imageBytes = bytesOf(images), labelBytes = bytesOf(labels);
  const auto expectError = [&](const std::string& img, const std::string& lab, const std::string& needle) {
    const std::string i2 = tempPath("bad_imgs.idx"), l2 = tempPath("bad_labels.idx");
    std::ofstream(i2, std::ios::binary) << img;
    std::ofstream(l2, std::ios::binary) << lab;
    try {
      loadIdx(i2, l2);
      FAIL() << "accepted " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expectError(imageBytes.substr(0, imageBytes.size() - 1), labelBytes, "truncated");
  expectError(imageBytes + "x", labelBytes, "after the data");
  expectError(imageBytes.substr(0, 3), labelBytes, "truncated in its header");
  std::string wrongType = imageBytes;
  wrongType[2] = 0x0D;  // float elements
  expectError(wrongType, labelBytes, "not unsigned byte");
  expectError(imageBytes, imageBytes, "dimensions");  // labels file with 3 dimensions
  std::string badLabel = labelBytes;
  badLabel.back() = 12;
  expectError(imageBytes, badLabel, "not a digit");
  std::string fewerLabels = labelBytes.substr(0, labelBytes.size() - 1);
  fewerLabels[7] = 4;  // header says 4 samples
  expectError(imageBytes, fewerLabels, "hold 5 samples");
}

TEST(Data, SplitAndShardsAreSeededPartitions) {
  const Dataset data = makeBlobs(103, 4, 5, 9);
  const DataSplit a = splitTrainTest(data, 0.2, 3), b = splitTrainTest(data, 0.2, 3);
  EXPECT_EQ(a.test.size(), 21u);
  EXPECT_EQ(a.train.size(), 82u);
  EXPECT_TRUE(a.train.features.isApprox(b.train.features, 0.0f));
  EXPECT_FALSE(a.train.features.isApprox(splitTrainTest(data, 0.2, 4).train.features, 0.0f));

  for (const Partition p : {Partition::Iid, Partition::NonIidByLabel}) {
    std::multiset<size_t> all;
    std::vector<std::set<int>> classes(4);
    for (int r = 0; r < 4; ++r) {
      const auto rows = shardRows(a.train, r, 4, p, 1);
      EXPECT_GE(rows.size(), 20u);
      EXPECT_LE(rows.size(), 21u);
      for (size_t row : rows) {
        all.insert(row);
        classes[static_cast<size_t>(r)].insert(a.train.labels[row]);
      }
    }
    EXPECT_EQ(all.size(), a.train.size());
    EXPECT_EQ(std::set<size_t>(all.begin(), all.end()).size(), a.train.size());  // each row exactly once
    if (p == Partition::NonIidByLabel) {
      for (const auto& c : classes) EXPECT_LE(c.size(), 3u);  // 5 classes over 4 ranks: few each
    }
  }
  EXPECT_THROW(shardRows(makeLeastSquares(10, 2, 1), 0, 2, Partition::NonIidByLabel, 1), InvalidArgument);
  EXPECT_THROW(shardRows(data, 0, 200, Partition::Iid, 1), InvalidArgument);
  EXPECT_THROW(parsePartition("dirichlet"), InvalidArgument);
}

TEST(Data, BatchSamplerVisitsEveryRowOncePerEpochAndIsAFunctionOfTheStep) {
  std::vector<size_t> shard(50);
  std::iota(shard.begin(), shard.end(), size_t{100});
  const BatchSampler sampler(shard, 10, 7, 2);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::multiset<size_t> seen;
    for (uint64_t s = 0; s < 5; ++s)
      for (size_t row : sampler.batch(epoch * 5 + s)) seen.insert(row);
    EXPECT_EQ(std::set<size_t>(seen.begin(), seen.end()).size(), 50u) << "epoch " << epoch;
  }
  EXPECT_EQ(sampler.batch(13), BatchSampler(shard, 10, 7, 2).batch(13));  // no state
  EXPECT_NE(sampler.batch(0), sampler.batch(5));                          // a new order each epoch
  EXPECT_NE(sampler.batch(0), BatchSampler(shard, 10, 7, 3).batch(0));    // and each rank
}

TEST(Optimizers, SgdAndAdamGiveTheTextbookValues) {
  std::vector<float> x = {1.0f, -2.0f}, g = {0.5f, 0.25f};
  auto sgd = Optimizer::make("sgd:lr=0.1,momentum=0.9", 2);
  sgd->step(x, g, 0, {});
  EXPECT_FLOAT_EQ(x[0], 1.0f - 0.1f * 0.5f);
  sgd->step(x, g, 1, {});  // v = 0.9 * 0.5 + 0.5 = 0.95
  EXPECT_FLOAT_EQ(x[0], 1.0f - 0.05f - 0.1f * 0.95f);

  std::vector<float> y = {1.0f}, gy = {0.5f};
  auto adam = Optimizer::make("adam:lr=0.01", 1);
  adam->step(y, gy, 0, {});  // bias-corrected first step: lr * sign(g)
  EXPECT_NEAR(y[0], 1.0f - 0.01f, 1e-6);
  EXPECT_THROW(Optimizer::make("adagrad", 1), InvalidArgument);
  EXPECT_THROW(Optimizer::make("sgd:lr=-1", 1), InvalidArgument);
  EXPECT_THROW(Optimizer::make("sgd:momentun=0.9", 1), InvalidArgument);
  EXPECT_THROW(sgd->step(x, std::vector<float>(3), 2, {}), InvalidArgument);
}

TEST(Optimizers, OneBitAdamIsAdamDuringWarmupThenCommunicatesTheMomentum) {
  std::vector<float> a = {1.0f, 2.0f}, b = a, g = {0.3f, -0.2f};
  auto adam = Optimizer::make("adam:lr=0.01", 2);
  auto onebit = Optimizer::make("onebit-adam:lr=0.01,warmup=3", 2);
  for (uint64_t s = 0; s < 3; ++s) {
    EXPECT_TRUE(onebit->reducesGradients(s));
    adam->step(a, g, s, {});
    onebit->step(b, g, s, {});
  }
  EXPECT_EQ(a, b);  // bit for bit
  EXPECT_FALSE(onebit->reducesGradients(3));
  EXPECT_THROW(onebit->step(b, g, 3, {}), InvalidArgument);  // needs the momentum all-reduce
  int calls = 0;
  onebit->step(b, g, 3, [&](std::span<float> m) {
    ++calls;
    ASSERT_EQ(m.size(), 2u);
    EXPECT_GT(m[0], 0.0f);  // the local momentum follows the gradient
    m[0] = 0.0f;             // the "all-reduced" momentum is what the update uses
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(b[0], a[0]);  // zero momentum: no move
  EXPECT_NE(b[1], a[1]);
}

TEST(Optimizers, StateRoundTripsAndRefusesAnotherOptimizer) {
  std::vector<float> x = {1.0f, 2.0f}, g = {0.1f, 0.2f};
  auto adam = Optimizer::make("adam", 2);
  adam->step(x, g, 0, {});
  std::stringstream buffer;
  adam->save(buffer);
  auto copy = Optimizer::make("adam", 2);
  copy->load(buffer);
  std::vector<float> x1 = x, x2 = x;
  adam->step(x1, g, 1, {});
  copy->step(x2, g, 1, {});
  EXPECT_EQ(x1, x2);
  std::stringstream again;
  adam->save(again);
  EXPECT_THROW(Optimizer::make("sgd", 2)->load(again), InvalidArgument);
  std::stringstream third;
  adam->save(third);
  EXPECT_THROW(Optimizer::make("adam", 3)->load(third), InvalidArgument);
}

}  // namespace
}  // namespace gradcomp
