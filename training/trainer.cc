#include "training/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unistd.h>

#include "collectives/allreduce.h"
#include "collectives/small_collectives.h"
#include "compressors/codec_spec.h"
#include "core/error.h"
#include "training/batch_sampler.h"
#include "training/checkpoint.h"
#include "training/gradient_reducer.h"
#include "training/model.h"
#include "training/optimizer.h"
#include "core/sha256.h"

namespace gradcomp {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Tensor ids of the trainer's own collectives: far above any bucket index, below the 2^20 limit of
// segment keys.
constexpr uint32_t kMomentumTensor = (1u << 20) - 1;
constexpr uint32_t kLossTensor = (1u << 20) - 2;

// "default": the compressed ring where the codec allows re-encoding partial sums, else all-gather.
std::string resolveAlgorithm(const TrainConfig& c) {
  if (c.algorithm != "default") return c.algorithm;
  AllreduceConfig probe;
  probe.algorithm = "ring";
  probe.codec = c.codec;
  probe.errorFeedback = c.errorFeedback;
  try {
    AllreduceAlgorithm::make(probe);
    return "ring";
  } catch (const InvalidArgument&) {
    return "allgather";
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

void drawProgress(uint64_t done, uint64_t total, double loss, double accuracy, double elapsed, uint64_t doneHere) {
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / std::max<uint64_t>(total, 1));
  const double eta = doneHere > 0 ? elapsed / static_cast<double>(doneHere) * static_cast<double>(total - done) : 0;
  std::fprintf(stderr, "\r[%.*s%.*s] %llu/%llu loss %.4f", filled, "##############################", kWidth - filled,
               "..............................", static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total), loss);
  if (accuracy >= 0) std::fprintf(stderr, " acc %.1f%%", 100 * accuracy);
  std::fprintf(stderr, " ETA %.0fs   ", eta);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace

std::string StepMetrics::csvHeader() {
  return "step,loss,test_accuracy,test_loss,bytes_sent,bytes_intra,bytes_inter,uncompressed_bytes,compute_s,"
         "backward_s,encode_s,decode_s,comm_s,exposed_s,efficiency,wall_s";
}

std::string StepMetrics::csvRow() const {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%llu,%.17g,%.17g,%.17g,%llu,%llu,%llu,%llu,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g",
                static_cast<unsigned long long>(step), loss, testAccuracy, testLoss,
                static_cast<unsigned long long>(bytesSent), static_cast<unsigned long long>(bytesIntra),
                static_cast<unsigned long long>(bytesInter), static_cast<unsigned long long>(uncompressedBytes),
                computeSeconds, backwardSeconds, encodeSeconds, decodeSeconds, commSeconds, exposedSeconds,
                efficiency(), wallSeconds);
  return buf;
}

StepMetrics StepMetrics::fromCsv(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) cells.push_back(cell);
  GRADCOMP_CHECK_ARG(cells.size() == 16, "metrics row with ", cells.size(), " columns, expected 16: '", line, "'");
  StepMetrics m;
  try {
    m.step = std::stoull(cells[0]);
    m.loss = std::stod(cells[1]);
    m.testAccuracy = std::stod(cells[2]);
    m.testLoss = std::stod(cells[3]);
    m.bytesSent = std::stoull(cells[4]);
    m.bytesIntra = std::stoull(cells[5]);
    m.bytesInter = std::stoull(cells[6]);
    m.uncompressedBytes = std::stoull(cells[7]);
    m.computeSeconds = std::stod(cells[8]);
    m.backwardSeconds = std::stod(cells[9]);
    m.encodeSeconds = std::stod(cells[10]);
    m.decodeSeconds = std::stod(cells[11]);
    m.commSeconds = std::stod(cells[12]);
    m.exposedSeconds = std::stod(cells[13]);
    m.wallSeconds = std::stod(cells[15]);
  } catch (const std::exception&) {
    GRADCOMP_THROW(InvalidArgument, "malformed metrics row '", line, "'");
  }
  return m;
}

DataSplit loadTrainingData(const TrainConfig& config) {
  return splitTrainTest(loadDataset(config.dataset, config.dataDir), config.testFraction, config.seed);
}

std::vector<std::string> summaryColumns(const TrainConfig& config) {
  std::vector<std::string> cols = {"name", "model", "dataset", "codec", "ef", "algorithm", "optimizer", "workers",
                                   "bucket_mb", "steps", "final_test_accuracy", "mean_test_accuracy",
                                   "mean_test_accuracy_evaluations", "final_test_loss", "final_train_loss",
                                   "bytes_per_step", "uncompressed_bytes_per_step", "compression_ratio", "encode_ms",
                                   "decode_ms", "compute_ms", "backward_ms", "comm_ms", "exposed_ms", "hidden_share",
                                   "efficiency", "wall_s"};
  for (const auto& l : config.modelLinks) cols.push_back("model_step_ms[" + l + "]");
  return cols;
}

namespace {

// Evaluations the summary's mean test accuracy averages: one evaluation is a noisy snapshot (sign without
// error feedback swings by tens of points between evaluations on the demo's non-iid split), the mean of
// the last few is what a comparison can rely on.
constexpr size_t kAccuracyEvaluations = 5;

// One rank's training run, in the phases a reader (and the Python and reproduction drivers) can take one at
// a time:
//   setup       model, optimizer, gradient reducer, batch sampler (the constructor)
//   restore     continue from this rank's checkpoint, agreeing with every rank on the step
//   step        forward and backward with the reduction overlapped, optimizer, loss averaged over ranks
//   evaluate    test accuracy and loss on rank 0 at the evaluation steps
//   record      metrics.csv, the progress bar
//   checkpoint  every checkpoint_every steps, on every rank
//   report      summary.json: medians, bytes, accuracy, modelled step times on other networks
class TrainingRun {
 public:
  TrainingRun(const TrainConfig& config, const DataSplit& data, Communicator& comm, const TrainOptions& options);

  uint64_t restore();
  void openMetrics(uint64_t firstStep);
  StepMetrics step(uint64_t step);
  void evaluate(uint64_t step, StepMetrics& m);
  void record(const StepMetrics& m, uint64_t firstStep);
  bool checkpointDue(uint64_t step) const;
  void checkpoint(uint64_t nextStep);
  nlohmann::json report() const;

  const std::vector<StepMetrics>& metrics() const { return metrics_; }
  std::span<const float> parameters() const { return model_->parameters(); }

 private:
  void saveState(std::ostream& out) const;
  void loadState(std::istream& in);
  static AllreduceConfig lossyConfig(const TrainConfig& c);

  const TrainConfig& config_;
  const DataSplit& data_;
  Communicator& comm_;
  const TrainOptions& options_;
  const int rank_, ranks_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  bool oneBit_;
  AllreduceConfig lossy_;
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<AllreduceAlgorithm> momentumAllreduce_, lossAllreduce_;
  BatchSampler sampler_;
  uint64_t configPrint_;
  std::string checkpointPath_;
  std::vector<float> grad_;
  std::vector<StepMetrics> metrics_;  // rank 0
  std::ofstream metricsOut_;
  double lastAccuracy_ = -1;
};

AllreduceConfig TrainingRun::lossyConfig(const TrainConfig& c) {
  AllreduceConfig lossy;
  lossy.algorithm = resolveAlgorithm(c);
  lossy.seed = c.seed;
  lossy.codec = c.codec;
  lossy.errorFeedback = c.errorFeedback;
  lossy.interAlgorithm = c.interAlgorithm;
  lossy.lowRank = c.lowRank;
  lossy.op = ReduceOp::Average;
  return lossy;
}

TrainingRun::TrainingRun(const TrainConfig& config, const DataSplit& data, Communicator& comm,
                         const TrainOptions& options)
    : config_(config),
      data_(data),
      comm_(comm),
      options_(options),
      rank_(comm.rank()),
      ranks_(comm.size()),
      model_(makeModel(config.model, data.train)),
      optimizer_(Optimizer::make(config.optimizer, model_->numParameters())),
      oneBit_(CodecSpec::parse(config.optimizer).name() == "onebit-adam"),
      lossy_(lossyConfig(config)),
      sampler_(shardRows(data.train, rank_, ranks_, parsePartition(config.partition), config.seed), config.batchSize,
               config.seed, static_cast<uint32_t>(rank_)),
      grad_(model_->numParameters(), 0.0f) {
  model_->initialize(config.seed);
  AllreduceConfig lossless;
  lossless.algorithm = "ring";
  lossless.seed = config.seed;
  ReducerOptions ro;
  ro.bucketBytes = static_cast<size_t>(config.bucketMB * 1048576.0);
  // 1-bit Adam's warm-up is full precision; its codec compresses the momentum afterwards.
  ro.compressed = oneBit_ ? lossless : lossy_;
  ro.uncompressed = lossless;
  ro.minCompressElements = config.minCompressElements;
  ro.compressOneDimensional = config.compressOneDimensional;
  ro.overlap = config.overlap;
  for (const auto& [key, value] : config.bucketOverrides.items()) {
    AllreduceConfig c = ro.compressed;
    c.codec = value.value("codec", c.codec);
    c.errorFeedback = value.value("ef", c.errorFeedback);
    c.algorithm = value.value("algorithm", c.algorithm);
    ro.bucketOverrides[std::stoul(key)] = c;
  }
  reducer_ = std::make_unique<GradientReducer>(comm, model_->layout(), ro);
  if (oneBit_) momentumAllreduce_ = AllreduceAlgorithm::make(lossy_);
  AllreduceConfig lossAverage = lossless;
  lossAverage.op = ReduceOp::Average;
  lossAllreduce_ = AllreduceAlgorithm::make(lossAverage);

  // A checkpoint belongs to the configuration that wrote it, minus the keys that may change on resume.
  nlohmann::json stable = config.toJson();
  for (const char* volatileKey : {"name", "stop_after", "checkpoint_every", "eval_every", "model_links", "timeout"})
    stable.erase(volatileKey);
  configPrint_ = fingerprint(stable.dump());
  if (!options.runDir.empty()) checkpointPath_ = options.runDir + "/checkpoint/rank" + std::to_string(rank_) + ".bin";
}

void TrainingRun::saveState(std::ostream& out) const {
  writeFloats(out, std::vector<float>(model_->parameters().begin(), model_->parameters().end()));
  optimizer_->save(out);
  reducer_->save(out);
  if (momentumAllreduce_) momentumAllreduce_->saveState(out);
}

void TrainingRun::loadState(std::istream& in) {
  std::vector<float> params(model_->numParameters());
  readFloats(in, params, "parameters");
  std::copy(params.begin(), params.end(), model_->parameters().begin());
  optimizer_->load(in);
  reducer_->load(in);
  if (momentumAllreduce_) momentumAllreduce_->loadState(in);
}

uint64_t TrainingRun::restore() {
  uint64_t firstStep = 0;
  const bool present = !checkpointPath_.empty() && std::filesystem::exists(checkpointPath_);
  GRADCOMP_CHECK_ARG(present || options_.resume != ResumeMode::Required, "--resume: no checkpoint in '",
                     options_.runDir, "/checkpoint' (rank ", rank_, " looked for rank", rank_,
                     ".bin). Is the run name right, and did the run write checkpoints (checkpoint_every > 0)?");
  if (present && options_.resume != ResumeMode::Never) {
    const auto checkHeader = [&](const CheckpointHeader& h) {
      GRADCOMP_CHECK_ARG(h.configFingerprint == configPrint_, "checkpoint '", checkpointPath_,
                         "' was written by a different configuration; refusing to resume");
      GRADCOMP_CHECK_ARG(h.worldSize == static_cast<uint32_t>(ranks_) && h.rank == static_cast<uint32_t>(rank_),
                         "checkpoint '", checkpointPath_, "' is rank ", h.rank, " of ", h.worldSize, ", this is rank ",
                         rank_, " of ", ranks_);
    };
    firstStep = readCheckpoint(checkpointPath_, checkHeader, [&](std::istream& in) { loadState(in); }).step;
  }
  // Every rank must resume from the same step, or the collectives would pair different steps.
  const Communicator::OperationScope scope(comm_, "resume-step agreement");
  const auto all = allgatherSmall(comm_, std::as_bytes(std::span(&firstStep, 1)), makeTag(scope.sequence(), 0xE0),
                                  "resume-step agreement");
  for (int r = 0; r < ranks_; ++r) {
    uint64_t theirs;
    std::memcpy(&theirs, all.data() + static_cast<size_t>(r) * sizeof theirs, sizeof theirs);
    GRADCOMP_CHECK(theirs == firstStep, CollectiveMismatch, "rank ", rank_, " resumes at step ", firstStep, " but rank ",
                   r, " at step ", theirs, " (missing or stale checkpoint)");
  }
  return firstStep;
}

void TrainingRun::openMetrics(uint64_t firstStep) {
  if (rank_ != 0 || options_.runDir.empty()) return;
  std::filesystem::create_directories(options_.runDir);
  std::ofstream(options_.runDir + "/config.json") << config_.toJson().dump(2) << "\n";
  // Keep the rows before the resume point; the rows after it are run again.
  std::ifstream old(options_.runDir + "/metrics.csv");
  std::string line;
  if (firstStep > 0 && old.good() && std::getline(old, line))
    while (std::getline(old, line))
      if (!line.empty()) {
        const StepMetrics m = StepMetrics::fromCsv(line);
        if (m.step < firstStep) metrics_.push_back(m);
        if (m.step < firstStep && m.testAccuracy >= 0) lastAccuracy_ = m.testAccuracy;
      }
  metricsOut_.open(options_.runDir + "/metrics.csv", std::ios::trunc);
  GRADCOMP_CHECK_ARG(metricsOut_.good(), "cannot write '", options_.runDir, "/metrics.csv'");
  metricsOut_ << StepMetrics::csvHeader() << "\n";
  for (const auto& m : metrics_) metricsOut_ << m.csvRow() << "\n";
  metricsOut_.flush();
}

StepMetrics TrainingRun::step(uint64_t step) {
  const Batch batch = makeBatch(data_.train, sampler_.batch(step));
  StepMetrics m;
  m.step = step;
  const bool reduceGradients = optimizer_->reducesGradients(step);
  const auto t0 = Clock::now();
  if (reduceGradients) reducer_->beginStep(grad_, static_cast<uint32_t>(step));
  Clock::time_point firstReady{};
  bool anyReady = false;
  const double localLoss = model_->lossAndGradient(batch, grad_, [&](size_t t) {
    if (!anyReady) firstReady = Clock::now(), anyReady = true;
    if (reduceGradients) reducer_->markReady(t);
  });
  const auto backwardEnd = Clock::now();
  m.computeSeconds = std::chrono::duration<double>(backwardEnd - t0).count();
  m.backwardSeconds = anyReady ? std::chrono::duration<double>(backwardEnd - firstReady).count() : 0;
  if (reduceGradients) {
    const ReducerStepReport r = reducer_->wait();
    m.bytesSent = r.bytesSent;
    m.bytesIntra = r.bytesSentIntra;
    m.bytesInter = r.bytesSentInter;
    m.uncompressedBytes = r.uncompressedBytes;
    m.encodeSeconds = r.encodeSeconds;
    m.decodeSeconds = r.decodeSeconds;
    m.commSeconds = r.commSeconds;
    m.exposedSeconds = r.exposedSeconds;
  }
  double momentumSeconds = 0;
  const MomentumAllreduce allreduceMomentum = [&](std::span<float> momentum) {
    const auto a = Clock::now();
    const auto r = momentumAllreduce_->run(momentum, comm_, AllreduceCall{kMomentumTensor, static_cast<uint32_t>(step), false});
    momentumSeconds = since(a);
    m.bytesSent += r.bytesSent;
    m.bytesIntra += r.bytesSentIntra;
    m.bytesInter += r.bytesSentInter;
    m.uncompressedBytes += ringAllreduceBytesPerRank(momentum.size(), ranks_);
    m.encodeSeconds += r.cost.encodeSeconds;
    m.decodeSeconds += r.cost.decodeSeconds;
    m.commSeconds += momentumSeconds;
    m.exposedSeconds += momentumSeconds;  // nothing left to overlap it with
  };
  const auto optimizerStart = Clock::now();
  optimizer_->step(model_->parameters(), grad_, step, allreduceMomentum);
  m.computeSeconds += since(optimizerStart) - momentumSeconds;

  float lossBuffer = static_cast<float>(localLoss);
  lossAllreduce_->run(std::span(&lossBuffer, 1), comm_, AllreduceCall{kLossTensor, static_cast<uint32_t>(step), false});
  m.loss = lossBuffer;
  GRADCOMP_CHECK(std::isfinite(m.loss), TrainingDiverged, "training diverged: the mean loss at step ", step, " is ",
                 m.loss, " (lower the learning rate, or use error feedback with nonfinite=skip)");
  return m;
}

void TrainingRun::evaluate(uint64_t step, StepMetrics& m) {
  const bool due = step + 1 == config_.steps || (config_.evalEvery > 0 && (step + 1) % config_.evalEvery == 0);
  if (rank_ != 0 || !due) return;
  if (model_->classifier()) m.testAccuracy = lastAccuracy_ = model_->accuracy(data_.test);
  m.testLoss = model_->meanLoss(data_.test);
}

void TrainingRun::record(const StepMetrics& m, uint64_t firstStep) {
  if (rank_ != 0) return;
  metrics_.push_back(m);
  if (metricsOut_.is_open()) metricsOut_ << m.csvRow() << "\n" << std::flush;
  if (options_.progress) drawProgress(m.step + 1, config_.steps, m.loss, lastAccuracy_, m.wallSeconds, m.step + 1 - firstStep);
}

bool TrainingRun::checkpointDue(uint64_t step) const {
  return !checkpointPath_.empty() && config_.checkpointEvery > 0 && (step + 1) % config_.checkpointEvery == 0;
}

void TrainingRun::checkpoint(uint64_t nextStep) {
  writeCheckpoint(checkpointPath_,
                  CheckpointHeader{nextStep, configPrint_, static_cast<uint32_t>(ranks_), static_cast<uint32_t>(rank_)},
                  [&](std::ostream& out) { saveState(out); });
}

nlohmann::json TrainingRun::report() const {
  // Timings: medians over the steps after the first (warm-up: first-touch allocations).
  const auto& ms = metrics_;
  std::vector<double> compute, backward, encode, decode, commTimes, exposed, accuracies;
  double bytes = 0, uncompressed = 0, commTotal = 0, exposedTotal = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    bytes += static_cast<double>(ms[i].bytesSent);
    uncompressed += static_cast<double>(ms[i].uncompressedBytes);
    if (ms[i].testAccuracy >= 0) accuracies.push_back(ms[i].testAccuracy);
    if (i == 0 && ms.size() > 1) continue;
    compute.push_back(ms[i].computeSeconds);
    backward.push_back(ms[i].backwardSeconds);
    encode.push_back(ms[i].encodeSeconds);
    decode.push_back(ms[i].decodeSeconds);
    commTimes.push_back(ms[i].commSeconds);
    exposed.push_back(ms[i].exposedSeconds);
    commTotal += ms[i].commSeconds;
    exposedTotal += ms[i].exposedSeconds;
  }
  const double steps = static_cast<double>(ms.size());
  double trainLoss = 0;
  const size_t tail = std::min<size_t>(20, ms.size());
  for (size_t i = ms.size() - tail; i < ms.size(); ++i) trainLoss += ms[i].loss / static_cast<double>(tail);
  const size_t lastK = std::min(kAccuracyEvaluations, accuracies.size());
  double meanAccuracy = lastK ? 0.0 : -1.0;
  for (size_t i = accuracies.size() - lastK; i < accuracies.size(); ++i) meanAccuracy += accuracies[i] / static_cast<double>(lastK);
  const double tCompute = median(compute), tBackward = median(backward);
  const double tCodec = median(encode) + median(decode);
  nlohmann::json s;
  s["name"] = config_.name;
  s["model"] = model_->name();
  s["dataset"] = config_.dataset;
  s["codec"] = config_.codec;
  s["ef"] = config_.errorFeedback;
  s["algorithm"] = lossy_.algorithm;
  s["optimizer"] = config_.optimizer;
  s["workers"] = ranks_;
  s["bucket_mb"] = config_.bucketMB;
  // What the cost model needs to model this run on other links and with other codecs (the Python
  // diagnosis of a codec-bound run: gradcomp.cost_model.alternatives).
  s["ranks_per_node"] = config_.ranksPerNode > 0 ? config_.ranksPerNode : 1;
  s["overlap"] = config_.overlap;
  {
    nlohmann::json buckets = nlohmann::json::array();
    for (const auto& b : reducer_->buckets()) buckets.push_back(b.elements);
    s["bucket_elements"] = buckets;
  }
  s["steps"] = config_.steps;
  s["final_test_accuracy"] = ms.back().testAccuracy;
  s["mean_test_accuracy"] = meanAccuracy;
  s["mean_test_accuracy_evaluations"] = lastK;
  s["final_test_loss"] = ms.back().testLoss;
  s["final_train_loss"] = trainLoss;
  s["bytes_per_step"] = bytes / steps;
  s["uncompressed_bytes_per_step"] = uncompressed / steps;
  s["compression_ratio"] = bytes > 0 ? uncompressed / bytes : 1.0;
  s["encode_ms"] = 1e3 * median(encode);
  s["decode_ms"] = 1e3 * median(decode);
  s["compute_ms"] = 1e3 * tCompute;
  s["backward_ms"] = 1e3 * tBackward;
  s["comm_ms"] = 1e3 * median(commTimes);
  s["exposed_ms"] = 1e3 * median(exposed);
  s["hidden_share"] = commTotal > 0 ? std::max(0.0, 1.0 - exposedTotal / commTotal) : 1.0;
  s["efficiency"] = tCompute / (tCompute + median(exposed));
  s["wall_s"] = ms.back().wallSeconds;
  s["config_sha256"] = configSha256(config_);
  // Modelled step time on other networks: this run's compute and codec times, the alpha-beta wire
  // time of the same buckets (collectives/README.md), hidden behind backward as far as it fits.
  const int perNode = config_.ranksPerNode > 0 ? config_.ranksPerNode : 1;
  for (const auto& links : config_.modelLinks) {
    const LinkModel lm = LinkModel::parse(links);
    double wire = 0, hideable = tBackward;
    if (oneBit_) {
      wire = momentumAllreduce_->predictSeconds(model_->numParameters(), ranks_, perNode, lm);
      hideable = 0;
    } else {
      for (size_t b = 0; b < reducer_->buckets().size(); ++b)
        wire += reducer_->algorithm(b).predictSeconds(reducer_->buckets()[b].elements, ranks_, perNode, lm);
    }
    if (!config_.overlap) hideable = 0;
    s["model_step_ms[" + links + "]"] = 1e3 * (tCompute + std::max(0.0, wire + tCodec - hideable));
  }
  return s;
}

}  // namespace

std::string configSha256(const TrainConfig& config) {
  // Everything that changes what a run computes; not the name (a sweep names runs after their values)
  // nor the interruption point.
  nlohmann::json j = config.toJson();
  j.erase("name");
  j.erase("stop_after");
  return sha256Hex(j.dump());
}

TrainResult trainOnCommunicator(const TrainConfig& config, const DataSplit& data, Communicator& comm,
                                const TrainOptions& options) {
  config.validate();
  GRADCOMP_CHECK_ARG(comm.size() == config.workers, "config asks for ", config.workers, " workers, the communicator has ",
                     comm.size(), " ranks");
  TrainingRun run(config, data, comm, options);
  TrainResult result;
  result.firstStep = run.restore();
  run.openMetrics(result.firstStep);
  const uint64_t lastStep = config.stopAfter > 0 ? std::min(config.steps, config.stopAfter) : config.steps;
  const auto start = Clock::now();
  for (uint64_t step = result.firstStep; step < lastStep; ++step) {
    StepMetrics m = run.step(step);
    run.evaluate(step, m);
    m.wallSeconds = since(start);
    run.record(m, result.firstStep);
    if (run.checkpointDue(step)) run.checkpoint(step + 1);
  }
  if (comm.rank() == 0 && options.progress && lastStep < config.steps) std::fprintf(stderr, "\n");
  result.completed = lastStep == config.steps;
  result.metrics = run.metrics();
  result.parameters.assign(run.parameters().begin(), run.parameters().end());
  if (comm.rank() == 0 && result.completed) {
    result.summary = run.report();
    if (!options.runDir.empty()) std::ofstream(options.runDir + "/summary.json") << result.summary.dump(2) << "\n";
  }
  return result;
}

}  // namespace gradcomp
