// Bad input to a training run (docs/reliability.md rows 27-29): every config value range-checked with its
// type (before, a negative value wrapped around and a fraction was truncated), checkpoints that are
// corrupted, truncated, of another format version or missing at --resume, and sweeps whose stored runs
// were made from another configuration. Each is an error naming the key, the file or the run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "core/error.h"
#include "experiments/train_command.h"
#include "tests/collectives/collective_test_util.h"
#include "training/checkpoint.h"
#include "training/trainer.h"

namespace gradcomp {
namespace {

std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "accepted";
}

std::string configError(const nlohmann::json& j) { return errorOf([&] { TrainConfig::fromJson(j); }); }

TEST(ConfigRanges, NegativeFractionalOutOfRangeAndMistypedValuesAreNamedWithTheirRange) {
  struct Case {
    nlohmann::json config;
    const char* expect;
  };
  const Case cases[] = {
      {{{"steps", -5}}, "config key 'steps': -5 is not an integer in [1, 1000000000000]"},
      {{{"steps", 600.7}}, "config key 'steps': 600.7 is not an integer"},
      {{{"steps", 0}}, "'steps': 0 is not an integer in [1,"},
      {{{"batch_size", -1}}, "'batch_size': -1 is not an integer in [1, 1048576]"},
      {{{"seed", -1}}, "'seed': -1 is not an integer in [0, "},
      {{{"eval_every", -1}}, "'eval_every': -1 is not an integer in [0, "},
      {{{"checkpoint_every", -1}}, "'checkpoint_every': -1"},
      {{{"min_compress_elements", -1}}, "'min_compress_elements': -1 is not an integer in [0, "},
      {{{"workers", 1e6}}, "'workers': 1000000.0 is not an integer in [1, 1024]"},
      {{{"bucket_mb", 0}}, "'bucket_mb': 0 is not a number in (0, 4096]"},
      {{{"timeout", -2}}, "'timeout': -2 is not a number in (0, 86400]"},
      {{{"test_fraction", 1.5}}, "'test_fraction': 1.5 is not a number in (0, 0.95]"},
      {{{"overlap", 1}}, "'overlap': 1 is not true or false"},
      {{{"codec", 8}}, "'codec': 8 is not a string"},
      {{{"model_links", "inter=1gbit"}}, "'model_links': \"inter=1gbit\" is not a list of strings"},
      {{{"steps", "many"}}, "'steps': \"many\" is not an integer"},
      {nlohmann::json::array({1, 2}), "a training config must be a JSON object"},
  };
  for (const Case& c : cases) EXPECT_NE(configError(c.config).find(c.expect), std::string::npos) << configError(c.config);
  // Integral floats and the ends of each range are accepted, and read exactly.
  const TrainConfig ok = TrainConfig::fromJson({{"steps", 600.0}, {"seed", 0}, {"eval_every", 0}, {"workers", 1024}});
  EXPECT_EQ(ok.steps, 600u);
  EXPECT_EQ(ok.workers, 1024);
}

TEST(ConfigRanges, OverridesKeepStringKeysStringsAndAreCheckedLikeTheFile) {
  nlohmann::json j = nlohmann::json::object();
  applyOverride(j, "name=123");
  EXPECT_EQ(j.at("name"), "123");  // a run name, not the number 123
  applyOverride(j, "batch_size=-1");
  EXPECT_NE(configError(j).find("'batch_size': -1"), std::string::npos);
  nlohmann::json array = nlohmann::json::array();
  EXPECT_NE(errorOf([&] { applyOverride(array, "steps=1"); }).find("not a JSON object"), std::string::npos);
}

std::string tempDir(const std::string& tag) {
  const auto dir = std::filesystem::temp_directory_path() / ("gradcomp_" + tag + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::vector<char> readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void writeBytes(const std::string& path, const std::vector<char>& b) {
  std::ofstream(path, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
}

TEST(Checkpoint, CorruptedTruncatedAndForeignFilesAreRefusedBeforeAnyStateIsUsed) {
  const std::string dir = tempDir("ckpt"), path = dir + "/rank0.bin";
  const std::vector<float> state = {1.5f, -2.0f, 3.25f};
  writeCheckpoint(path, CheckpointHeader{7, 42, 1, 0}, [&](std::ostream& out) { writeFloats(out, state); });
  const auto read = [&] {
    std::vector<float> back(3);
    bool used = false;
    const std::string e = errorOf([&] {
      readCheckpoint(path, [](const CheckpointHeader&) {}, [&](std::istream& in) {
        used = true;
        readFloats(in, back, "state");
      });
    });
    return std::make_pair(e, used);
  };
  EXPECT_EQ(read().first, "accepted");
  const auto good = readBytes(path);
  // Every single flipped byte (header, state or trailer) is caught, and no state is read from it. Before,
  // a flipped byte in the state was accepted and training went on from corrupted parameters.
  for (size_t i = 0; i < good.size(); ++i) {
    auto bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    writeBytes(path, bad);
    const auto [e, used] = read();
    EXPECT_NE(e, "accepted") << "byte " << i;
    EXPECT_FALSE(used) << "byte " << i << ": " << e;
    EXPECT_NE(e.find(path), std::string::npos) << e;
  }
  auto cut = good;
  cut.resize(good.size() - 5);
  writeBytes(path, cut);
  EXPECT_NE(read().first.find("truncated"), std::string::npos) << read().first;
  auto flipped = good;
  flipped[good.size() - 12] ^= 1;  // the state's last float
  writeBytes(path, flipped);
  EXPECT_NE(read().first.find("SHA-256 checksum does not match"), std::string::npos) << read().first;
  auto v1 = good;
  v1[7] = '1';  // the format-1 magic "GCGCCKP1"
  writeBytes(path, v1);
  EXPECT_NE(read().first.find("format version 1; this build reads version 2"), std::string::npos) << read().first;
  writeBytes(path, {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!'});
  EXPECT_NE(read().first.find("is not a gradcomp checkpoint"), std::string::npos) << read().first;
  std::filesystem::remove_all(dir);
}

TrainConfig tinyConfig() {
  TrainConfig c;
  c.model = "mlp:hidden=8";
  c.dataset = "blobs:n=200,d=8,classes=3";
  c.workers = 2;
  c.steps = 6;
  c.batchSize = 8;
  c.evalEvery = 2;
  return c;
}

TEST(Resume, ResumeWithoutACheckpointIsAnErrorNamingTheDirectory) {
  // Before, a typo in the run name silently started from step 0 and overwrote metrics.csv.
  const std::string dir = tempDir("resume");
  const TrainConfig c = tinyConfig();
  const DataSplit data = loadTrainingData(c);
  TrainOptions o;
  o.runDir = dir + "/typo";
  o.resume = ResumeMode::Required;
  const auto errors = runInProcess(2, [&](Communicator& comm) { trainOnCommunicator(c, data, comm, o); });
  ASSERT_TRUE(errors[0]);
  const std::string e = testing::messageOf(errors[0]);
  EXPECT_NE(e.find("--resume: no checkpoint in '" + dir + "/typo/checkpoint'"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(dir + "/typo/metrics.csv"));
  std::filesystem::remove_all(dir);
}

TEST(Resume, TheMeanAccuracyOfTheLastEvaluationsIsReportedBesideTheLastOne) {
  TrainConfig c = tinyConfig();
  c.steps = 24;
  c.evalEvery = 2;  // 12 evaluations: the mean covers the last 5
  const DataSplit data = loadTrainingData(c);
  std::vector<TrainResult> r(2);
  testing::runRanksOk(2, [&](Communicator& comm) { r[static_cast<size_t>(comm.rank())] = trainOnCommunicator(c, data, comm, {}); });
  double sum = 0;
  for (size_t s : {size_t{15}, size_t{17}, size_t{19}, size_t{21}, size_t{23}}) sum += r[0].metrics[s].testAccuracy;
  EXPECT_EQ(r[0].summary.at("mean_test_accuracy_evaluations"), 5);
  EXPECT_DOUBLE_EQ(r[0].summary.at("mean_test_accuracy").get<double>(), sum / 5);
  EXPECT_EQ(r[0].summary.at("final_test_accuracy").get<double>(), r[0].metrics.back().testAccuracy);
  EXPECT_EQ(r[0].summary.at("config_sha256"), configSha256(c));
}

TEST(SweepReruns, AStoredRunFromAnotherConfigurationIsRunAgainOrRefusedWithNoRerun) {
  // Before, "finished" meant "has a summary": rerunning with --set steps=100 skipped every run and
  // reported the old results.
  const std::string dir = tempDir("sweep_rerun");
  nlohmann::json sweep = {{"base", tinyConfig().toJson()}, {"grid", {{"codec", {"none", "int8"}}}}};
  std::ofstream(dir + "/sweep.json") << sweep.dump();
  TrainCommandOptions o;
  o.file = dir + "/sweep.json";
  o.out = dir + "/out";
  std::ostringstream first, same, changed;
  EXPECT_EQ(runSweepCommand(o, nullptr, first), 0u);
  EXPECT_EQ(runSweepCommand(o, nullptr, same), 0u);
  EXPECT_NE(same.str().find("codec=int8: done before, skipped"), std::string::npos) << same.str();
  o.sets = {"steps=8"};
  EXPECT_EQ(runSweepCommand(o, nullptr, changed), 0u);
  EXPECT_NE(changed.str().find("codec=int8: stored run is from another configuration, running it again"),
            std::string::npos) << changed.str();
  std::ifstream summary(dir + "/out/runs/codec=int8/summary.json");
  EXPECT_EQ(nlohmann::json::parse(summary).at("steps"), 8);
  o.sets = {"steps=10"};
  o.noRerun = true;
  std::ostringstream refused;
  EXPECT_NE(errorOf([&] { runSweepCommand(o, nullptr, refused); }).find("was made from another configuration"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(SweepReruns, FailedRunsAreCountedAfterTheOthersFinish) {
  const std::string dir = tempDir("sweep_failed");
  nlohmann::json sweep = {{"base", tinyConfig().toJson()},
                          {"cases", {{{"name", "ok"}, {"codec", "none"}}, {{"name", "bad"}, {"codec", "int9"}},
                                     {{"name", "also-ok"}, {"codec", "fp16"}}}}};
  std::ofstream(dir + "/sweep.json") << sweep.dump();
  TrainCommandOptions o;
  o.file = dir + "/sweep.json";
  o.out = dir + "/out";
  std::ostringstream out;
  EXPECT_EQ(runSweepCommand(o, nullptr, out), 1u);  // before: 0, and the command exited 0
  EXPECT_TRUE(std::filesystem::exists(dir + "/out/runs/also-ok/summary.json"));
  EXPECT_NE(out.str().find("1 of 3 runs failed (their failed.json says why): bad"), std::string::npos) << out.str();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gradcomp
