// The gradient reducer (bucket plan, exact averages, reports, misuse and failures) and the trainer
// (identical parameters on every rank, bitwise checkpoint/resume, configs and sweeps, the accuracy
// targets of the demo).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <mutex>

#include "collectives/inprocess_communicator.h"
#include "core/error.h"
#include "experiments/train_command.h"
#include "tests/collectives/collective_test_util.h"
#include "training/gradient_reducer.h"
#include "training/model.h"
#include "training/trainer.h"

namespace gradcomp {
namespace {

using namespace gradcomp::testing;

ParameterLayout layoutOf(const std::vector<std::vector<size_t>>& shapes) {
  ParameterLayout l;
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::string name = "t";  // (not "t" + to_string: GCC 12's -Wrestrict false positive)
    name += std::to_string(i);
    l.add(name, shapes[i]);
  }
  return l;
}

TEST(Reducer, PlansBucketsInBackwardOrderAndKeepsSmallAnd1DTensorsUncompressed) {
  // w0 [64x64], b0 [64], w1 [64x32], b1 [32], w2 [32x10] (320 < 1024: small), b2 [10]
  const auto layout = layoutOf({{64, 64}, {64}, {64, 32}, {32}, {32, 10}, {10}});
  ReducerOptions o;
  o.compressed.codec = "int8";
  o.bucketBytes = 3000 * 4;  // w1 (2048) fits, w1 + w0 (6144) does not
  const auto plans = planBuckets(layout, o);
  // In the order backward completes them: w1; then the uncompressed b2, w2, b1, b0 (complete when b0
  // is, just before w0); then w0.
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].tensors, (std::vector<size_t>{2}));
  EXPECT_EQ(plans[1].tensors, (std::vector<size_t>{5, 4, 3, 1}));
  EXPECT_EQ(plans[2].tensors, (std::vector<size_t>{0}));
  EXPECT_FALSE(plans[1].compressed);
  EXPECT_EQ(plans[1].config.codec, "none");
  EXPECT_TRUE(plans[0].compressed);
  EXPECT_EQ(plans[0].config.codec, "int8");
  EXPECT_EQ(plans[1].offsets, (std::vector<size_t>{0, 10, 330, 362}));
  for (const auto& p : plans) EXPECT_EQ(p.config.op, ReduceOp::Average);

  o.compressOneDimensional = true;
  o.minCompressElements = 1;
  o.bucketBytes = size_t{1} << 20;
  EXPECT_EQ(planBuckets(layout, o).size(), 1u);  // everything in one compressed bucket
  o.bucketOverrides[0].codec = "fp16";
  EXPECT_EQ(planBuckets(layout, o)[0].config.codec, "fp16");
  o.bucketOverrides[3].codec = "fp16";
  EXPECT_THROW(planBuckets(layout, o), InvalidArgument);  // no bucket 3
}

TEST(Reducer, AveragesExactlyAndReportsTheBytesOfEveryBucket) {
  const auto layout = layoutOf({{40, 30}, {32}, {30, 20}, {20}});  // every bucket divisible by 4
  const int ranks = 4;
  for (const bool overlap : {true, false}) {
    runRanksOk(ranks, [&](Communicator& comm) {
      ReducerOptions o;
      o.bucketBytes = 800 * 4;
      o.minCompressElements = 100;  // w1 (600) and w0 (1200) in two buckets, the biases in a third
      o.overlap = overlap;
      GradientReducer reducer(comm, layout, o);
      ASSERT_EQ(reducer.buckets().size(), 3u);
      for (uint32_t step = 0; step < 3; ++step) {
        std::vector<float> grad = exactInput(comm.rank(), ranks, layout.totalElements());
        std::vector<float> expected = exactSum(ranks, layout.totalElements());
        for (auto& v : expected) v /= ranks;  // exact: a power of two
        reducer.beginStep(grad, step);
        for (size_t t = layout.size(); t-- > 0;) reducer.markReady(t);
        const ReducerStepReport r = reducer.wait();
        EXPECT_EQ(grad, expected);
        const uint64_t floats = layout.totalElements();
        EXPECT_EQ(r.bytesSent, 2 * (ranks - 1) * floats * 4 / ranks);
        EXPECT_EQ(r.uncompressedBytes, r.bytesSent);
        EXPECT_EQ(r.buckets, 3u);
        EXPECT_GT(r.commSeconds, 0.0);
        EXPECT_GE(r.hiddenShare(), 0.0);
        EXPECT_LE(r.hiddenShare(), 1.0);
      }
    });
  }
}

TEST(Reducer, CompressedBucketsGiveTheSameBitsOnEveryRank) {
  const auto layout = layoutOf({{100, 50}, {50}, {50, 40}});
  const int ranks = 3;
  std::vector<std::vector<float>> results(ranks);
  std::mutex mutex;
  runRanksOk(ranks, [&](Communicator& comm) {
    ReducerOptions o;
    o.compressed.codec = "sign";
    o.compressed.errorFeedback = "ef";
    GradientReducer reducer(comm, layout, o);
    std::vector<float> grad = normalInput(comm.rank(), layout.totalElements());
    reducer.beginStep(grad, 0);
    const auto r = reducer.wait();  // marks everything ready
    EXPECT_LT(r.bytesSent, r.uncompressedBytes / 8);
    std::lock_guard lock(mutex);
    results[static_cast<size_t>(comm.rank())] = grad;
  });
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

TEST(Reducer, MisuseIsAnErrorThatNamesIt) {
  const auto layout = layoutOf({{8, 8}, {8}});
  runRanksOk(1, [&](Communicator& comm) {
    GradientReducer reducer(comm, layout, ReducerOptions{});
    std::vector<float> grad(layout.totalElements()), wrong(3);
    EXPECT_THROW(reducer.markReady(0), InvalidArgument);  // before beginStep
    EXPECT_THROW(reducer.beginStep(wrong, 0), InvalidArgument);
    reducer.beginStep(grad, 0);
    reducer.markReady(1);
    try {
      reducer.markReady(1);
      FAIL();
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'t1') marked ready twice"), std::string::npos) << e.what();
    }
    EXPECT_THROW(reducer.markReady(7), InvalidArgument);
    reducer.wait();
  });
  ReducerOptions bad;
  bad.compressed.codec = "topk:ratio=0.1";  // the ring cannot carry top-k: refused when built
  runRanksOk(1, [&](Communicator& comm) { EXPECT_THROW(GradientReducer(comm, layout, bad), InvalidArgument); });
}

TEST(Reducer, APeerThatFailsMidStepFailsEveryWaitWithinTheDeadline) {
  const auto layout = layoutOf({{64, 64}, {64}});
  CommunicatorOptions co;
  co.timeoutSeconds = 5;
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = runInProcess(3, [&](Communicator& comm) {
    GradientReducer reducer(comm, layout, ReducerOptions{});
    std::vector<float> grad(layout.totalElements(), 1.0f);
    reducer.beginStep(grad, 0);
    if (comm.rank() == 1) throw std::runtime_error("worker 1 crashed in backward");
    reducer.wait();
  }, co);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  for (int r : {0, 2}) {
    ASSERT_TRUE(errors[static_cast<size_t>(r)]) << r;
    EXPECT_THROW(std::rethrow_exception(errors[static_cast<size_t>(r)]), PeerFailure);
  }
}

// Trains `config` on in-process workers; returns every rank's result.
std::vector<TrainResult> trainAll(const TrainConfig& config, const DataSplit& data, const TrainOptions& options = {}) {
  std::vector<TrainResult> results(static_cast<size_t>(config.workers));
  CommunicatorOptions co;
  co.timeoutSeconds = 30;
  runRanksOk(config.workers, [&](Communicator& comm) {
    results[static_cast<size_t>(comm.rank())] = trainOnCommunicator(config, data, comm, options);
  }, co);
  return results;
}

TrainConfig smallConfig() {
  TrainConfig c;
  c.model = "mlp:hidden=24";
  c.dataset = "blobs:n=600,d=32,classes=4";
  c.workers = 3;
  c.steps = 40;
  c.batchSize = 16;
  c.optimizer = "sgd:lr=0.2,momentum=0.9";
  c.codec = "int8:rounding=stochastic";
  c.errorFeedback = "ef";
  c.minCompressElements = 100;
  c.bucketMB = 0.002;  // several buckets
  c.evalEvery = 10;
  return c;
}

TEST(Trainer, EveryRankHoldsTheSameParametersAndTheRunIsReproducible) {
  const TrainConfig c = smallConfig();
  const DataSplit data = loadTrainingData(c);
  const auto a = trainAll(c, data), b = trainAll(c, data);
  for (const auto& r : a) EXPECT_EQ(r.parameters, a[0].parameters);
  EXPECT_EQ(a[0].parameters, b[0].parameters);
  ASSERT_EQ(a[0].metrics.size(), 40u);
  EXPECT_TRUE(a[0].completed);
  EXPECT_LT(a[0].metrics.back().loss, a[0].metrics.front().loss);
  EXPECT_GT(a[0].summary.at("compression_ratio").get<double>(), 2.0);  // int8 on most of the model
  EXPECT_GE(a[0].metrics.back().testAccuracy, 0.0);
  EXPECT_EQ(a[0].metrics[5].testAccuracy, -1.0);  // evaluated every 10 steps only
  TrainConfig other = c;
  other.seed = 2;
  EXPECT_NE(trainAll(other, loadTrainingData(other))[0].parameters, a[0].parameters);
}

void expectResumeIsBitwiseIdentical(TrainConfig c, const std::string& tag) {
  const DataSplit data = loadTrainingData(c);
  const auto straight = trainAll(c, data);
  const std::string dir =
      (std::filesystem::temp_directory_path() / std::string("gradcomp_resume_").append(tag).append(std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  TrainOptions o;
  o.runDir = dir;
  o.resume = true;
  c.checkpointEvery = 10;
  c.stopAfter = 25;  // interrupted after step 25; the last checkpoint is at 20
  const auto first = trainAll(c, data, o);
  EXPECT_FALSE(first[0].completed);
  c.stopAfter = 0;
  const auto resumed = trainAll(c, data, o);
  EXPECT_EQ(resumed[0].firstStep, 20u);
  ASSERT_TRUE(resumed[0].completed);
  for (size_t r = 0; r < resumed.size(); ++r) EXPECT_EQ(resumed[r].parameters, straight[r].parameters) << tag << " rank " << r;
  ASSERT_EQ(resumed[0].metrics.size(), straight[0].metrics.size());
  for (size_t s = 0; s < straight[0].metrics.size(); ++s)
    EXPECT_EQ(resumed[0].metrics[s].loss, straight[0].metrics[s].loss) << tag << " step " << s;
  EXPECT_TRUE(std::filesystem::exists(dir + "/summary.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoint/rank2.bin"));

  // A different configuration refuses the checkpoint instead of silently mixing runs.
  c.codec = "fp16";
  c.errorFeedback = "none";
  const auto errors = runInProcess(c.workers, [&](Communicator& comm) { trainOnCommunicator(c, data, comm, o); });
  for (const auto& e : errors) {
    ASSERT_TRUE(e);
    try {
      std::rethrow_exception(e);
    } catch (const InvalidArgument& ex) {
      EXPECT_NE(std::string(ex.what()).find("different configuration"), std::string::npos) << ex.what();
    } catch (const PeerFailure&) {
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(Trainer, ResumeFromACheckpointIsBitwiseIdenticalWithErrorFeedbackAndStochasticRounding) {
  expectResumeIsBitwiseIdentical(smallConfig(), "int8");
}

TEST(Trainer, ResumeIsBitwiseIdenticalForOneBitAdamAcrossItsWarmup) {
  TrainConfig c = smallConfig();
  c.optimizer = "onebit-adam:lr=0.01,warmup=15";
  c.codec = "sign";
  c.errorFeedback = "ef";
  expectResumeIsBitwiseIdentical(c, "onebit");
}

TEST(Trainer, OneBitAdamSendsSignBytesAfterWarmupAndStillLearns) {
  TrainConfig c = smallConfig();
  c.optimizer = "onebit-adam:lr=0.01,warmup=10";
  c.codec = "sign";
  c.steps = 60;
  const auto r = trainAll(c, loadTrainingData(c));
  const auto& m = r[0].metrics;
  EXPECT_NEAR(static_cast<double>(m[5].bytesSent), static_cast<double>(m[5].uncompressedBytes),
              0.01 * static_cast<double>(m[5].uncompressedBytes));  // warm-up: full precision
  EXPECT_LT(m[30].bytesSent * 10, m[30].uncompressedBytes);  // then 1 bit per momentum entry
  EXPECT_GT(m.back().testAccuracy, 0.8);
  for (const auto& x : r) EXPECT_EQ(x.parameters, r[0].parameters);
}

TEST(Trainer, BucketOverridesChangeTheCodecOfOneBucket) {
  TrainConfig c = smallConfig();
  c.steps = 3;
  c.codec = "none";
  c.errorFeedback = "none";
  const auto plain = trainAll(c, loadTrainingData(c));
  c.bucketOverrides = {{"0", {{"codec", "sign"}, {"ef", "ef"}}}};
  const auto mixed = trainAll(c, loadTrainingData(c));
  EXPECT_LT(mixed[0].metrics[1].bytesSent, plain[0].metrics[1].bytesSent);
  c.bucketOverrides = {{"99", {{"codec", "sign"}}}};
  const auto errors = runInProcess(c.workers, [&](Communicator& comm) { trainOnCommunicator(c, loadTrainingData(c), comm, {}); });
  ASSERT_TRUE(errors[0]);
  EXPECT_THROW(std::rethrow_exception(errors[0]), InvalidArgument);  // no bucket 99
}

TEST(Trainer, ConfigsRefuseUnknownKeysAndBadValuesByName) {
  const auto message = [](const nlohmann::json& j) {
    try {
      TrainConfig::fromJson(j);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message({{"codecs", "int8"}}).find("unknown config key 'codecs'"), std::string::npos);
  EXPECT_NE(message({{"steps", "many"}}).find("'steps'"), std::string::npos);
  EXPECT_NE(message({{"workers", 0}}).find("workers"), std::string::npos);
  EXPECT_NE(message({{"partition", "dirichlet"}}).find("dirichlet"), std::string::npos);
  EXPECT_NE(message({{"name", "a/b"}}).find("run name"), std::string::npos);
  EXPECT_NE(message({{"bucket_overrides", {{"x", {{"codec", "fp16"}}}}}}).find("not a bucket index"), std::string::npos);
  EXPECT_NE(message({{"bucket_overrides", {{"0", {{"codecs", "fp16"}}}}}}).find("'codecs'"), std::string::npos);
  const TrainConfig c = TrainConfig::fromJson({{"codec", "fp16"}, {"steps", 7}});
  EXPECT_EQ(TrainConfig::fromJson(c.toJson()).toJson(), c.toJson());

  nlohmann::json j = nlohmann::json::object();
  applyOverride(j, "codec=topk:ratio=0.01");
  applyOverride(j, "steps=12");
  applyOverride(j, "overlap=false");
  EXPECT_EQ(j.at("codec"), "topk:ratio=0.01");
  EXPECT_EQ(j.at("steps"), 12);
  EXPECT_EQ(j.at("overlap"), false);
  EXPECT_THROW(applyOverride(j, "novalue"), InvalidArgument);
}

TEST(Sweep, ExpandsCasesTimesTheGridWithUniqueNames) {
  const nlohmann::json sweep = {
      {"base", {{"steps", 5}}},
      {"grid", {{"workers", {2, 4}}, {"bucket_mb", {1, 25}}}},
      {"cases", {{{"name", "none"}, {"codec", "none"}}, {{"name", "topk1%+ef"}, {"codec", "topk:ratio=0.01"}, {"ef", "ef"}}}}};
  const auto runs = expandSweep(sweep);
  ASSERT_EQ(runs.size(), 8u);
  EXPECT_EQ(runs[0].at("name"), "none,bucket_mb=1,workers=2");  // ("," kept: a valid file name)
  EXPECT_EQ(runs[7].at("name"), "topk1%+ef,bucket_mb=25,workers=4");
  EXPECT_EQ(runs[7].at("codec"), "topk:ratio=0.01");
  EXPECT_EQ(runs[7].at("steps"), 5);
  EXPECT_THROW(expandSweep({{"grid", {{"workers", nlohmann::json::array()}}}}), InvalidArgument);
  EXPECT_THROW(expandSweep({{"grids", nlohmann::json::object()}}), InvalidArgument);
  EXPECT_THROW(expandSweep({{"cases", {{{"name", "a"}}, {{"name", "a"}}}}}), InvalidArgument);
  EXPECT_THROW(expandSweep({{"grid", {{"stepz", {1}}}}}), InvalidArgument);  // validated before running
}

TEST(Sweep, RunsAreStoredFinishedOnesSkippedAndTheTableWritten) {
  const std::string dir = (std::filesystem::temp_directory_path() / std::string("gradcomp_sweep_").append(std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  nlohmann::json sweep = {{"base", smallConfig().toJson()}, {"grid", {{"codec", {"none", "fp16"}}}}};
  sweep["base"]["steps"] = 5;
  std::ofstream(dir + "/sweep.json") << sweep.dump();
  TrainCommandOptions o;
  o.file = dir + "/sweep.json";
  o.out = dir + "/out";
  std::ostringstream first, second;
  runSweepCommand(o, nullptr, first);
  EXPECT_TRUE(std::filesystem::exists(dir + "/out/runs/codec=fp16/metrics.csv"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/out/runs/codec=none/config.json"));
  std::ifstream csv(dir + "/out/results.csv");
  std::string header, row1, row2, extra;
  std::getline(csv, header);
  std::getline(csv, row1);
  std::getline(csv, row2);
  EXPECT_FALSE(std::getline(csv, extra));
  EXPECT_EQ(header.rfind("\"name\",\"model\"", 0), 0u) << header;
  EXPECT_EQ(row1.rfind("\"codec=none\"", 0), 0u) << row1;
  runSweepCommand(o, nullptr, second);
  EXPECT_NE(second.str().find("codec=none: done before, skipped"), std::string::npos) << second.str();
  std::filesystem::remove_all(dir);
}

// The demo's targets (configs/demo.json, seed 1): uncompressed >= 96 %, every codec with error
// feedback within 1.0 point of it at the same steps, sign without error feedback worse than with it.
// Deterministic on a given build; the margins leave room for other CPUs' rounding.
TEST(Targets, DigitsMlpAccuracyOfEveryDemoCodec) {
  std::ifstream in(std::string(GRADCOMP_SOURCE_DIR) + "/configs/demo.json");
  const nlohmann::json sweep = nlohmann::json::parse(in);
  auto runs = expandSweep(sweep);
  std::map<std::string, double> accuracy, trainLoss;
  for (auto& run : runs) {
    run["data_dir"] = std::string(GRADCOMP_SOURCE_DIR) + "/data";
    const TrainConfig c = TrainConfig::fromJson(run);
    const auto r = trainAll(c, loadTrainingData(c));
    accuracy[c.name] = r[0].summary.at("final_test_accuracy").get<double>();
    trainLoss[c.name] = r[0].summary.at("final_train_loss").get<double>();
  }
  EXPECT_GE(accuracy["none"], 0.96);
  for (const auto& [name, acc] : accuracy)
    if (name.find("+ef") != std::string::npos) {
      EXPECT_GE(acc, accuracy["none"] - 0.010) << name;
    }
  EXPECT_LT(accuracy["sign"], accuracy["sign+ef"]);
  EXPECT_GT(trainLoss["sign"], 1.5 * trainLoss["sign+ef"]);
}

}  // namespace
}  // namespace gradcomp
