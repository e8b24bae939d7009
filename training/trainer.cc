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
                                   "bucket_mb", "steps", "final_test_accuracy", "final_test_loss", "final_train_loss",
                                   "bytes_per_step", "uncompressed_bytes_per_step", "compression_ratio", "encode_ms",
                                   "decode_ms", "compute_ms", "backward_ms", "comm_ms", "exposed_ms", "hidden_share",
                                   "efficiency", "wall_s"};
  for (const auto& l : config.modelLinks) cols.push_back("model_step_ms[" + l + "]");
  return cols;
}

TrainResult trainOnCommunicator(const TrainConfig& config, const DataSplit& data, Communicator& comm,
                                const TrainOptions& options) {
  config.validate();
  GRADCOMP_CHECK_ARG(comm.size() == config.workers, "config asks for ", config.workers, " workers, the communicator has ",
                     comm.size(), " ranks");
  const int rank = comm.rank(), ranks = comm.size();
  const auto start = Clock::now();

  auto model = makeModel(config.model, data.train);
  model->initialize(config.seed);
  const size_t n = model->numParameters();
  auto optimizer = Optimizer::make(config.optimizer, n);
  const bool oneBit = CodecSpec::parse(config.optimizer).name() == "onebit-adam";

  AllreduceConfig lossless;
  lossless.algorithm = "ring";
  lossless.seed = config.seed;
  AllreduceConfig lossy = lossless;
  lossy.algorithm = resolveAlgorithm(config);
  lossy.codec = config.codec;
  lossy.errorFeedback = config.errorFeedback;
  lossy.interAlgorithm = config.interAlgorithm;
  lossy.op = ReduceOp::Average;

  ReducerOptions ro;
  ro.bucketBytes = static_cast<size_t>(config.bucketMB * 1048576.0);
  // 1-bit Adam's warm-up is full precision; its codec compresses the momentum afterwards.
  ro.compressed = oneBit ? lossless : lossy;
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
  GradientReducer reducer(comm, model->layout(), ro);
  std::unique_ptr<AllreduceAlgorithm> momentumAllreduce;
  if (oneBit) momentumAllreduce = AllreduceAlgorithm::make(lossy);
  AllreduceConfig lossAverage = lossless;
  lossAverage.op = ReduceOp::Average;
  auto lossAllreduce = AllreduceAlgorithm::make(lossAverage);

  const BatchSampler sampler(shardRows(data.train, rank, ranks, parsePartition(config.partition), config.seed),
                             config.batchSize, config.seed, static_cast<uint32_t>(rank));

  // Checkpoint and resume.
  nlohmann::json stable = config.toJson();
  for (const char* volatileKey : {"name", "stop_after", "checkpoint_every", "eval_every", "model_links", "timeout"})
    stable.erase(volatileKey);
  const uint64_t configPrint = fingerprint(stable.dump());
  const std::string checkpointPath =
      options.runDir.empty() ? "" : options.runDir + "/checkpoint/rank" + std::to_string(rank) + ".bin";
  const auto saveState = [&](std::ostream& out) {
    writeFloats(out, std::vector<float>(model->parameters().begin(), model->parameters().end()));
    optimizer->save(out);
    reducer.save(out);
    if (momentumAllreduce) momentumAllreduce->errorFeedback().save(out);
  };
  const auto loadState = [&](std::istream& in) {
    std::vector<float> params(n);
    readFloats(in, params, "parameters");
    std::copy(params.begin(), params.end(), model->parameters().begin());
    optimizer->load(in);
    reducer.load(in);
    if (momentumAllreduce) momentumAllreduce->errorFeedback().load(in);
  };
  uint64_t firstStep = 0;
  if (options.resume && !checkpointPath.empty() && std::filesystem::exists(checkpointPath)) {
    const auto checkHeader = [&](const CheckpointHeader& h) {
      GRADCOMP_CHECK_ARG(h.configFingerprint == configPrint, "checkpoint '", checkpointPath,
                         "' was written by a different configuration; refusing to resume");
      GRADCOMP_CHECK_ARG(h.worldSize == static_cast<uint32_t>(ranks) && h.rank == static_cast<uint32_t>(rank),
                         "checkpoint '", checkpointPath, "' is rank ", h.rank, " of ", h.worldSize, ", this is rank ",
                         rank, " of ", ranks);
    };
    firstStep = readCheckpoint(checkpointPath, checkHeader, loadState).step;
  }
  // Every rank must resume from the same step, or the collectives would pair different steps.
  {
    const Communicator::OperationScope scope(comm, "resume-step agreement");
    const auto all = allgatherSmall(comm, std::as_bytes(std::span(&firstStep, 1)), makeTag(scope.sequence(), 0xE0),
                                    "resume-step agreement");
    for (int r = 0; r < ranks; ++r) {
      uint64_t theirs;
      std::memcpy(&theirs, all.data() + static_cast<size_t>(r) * sizeof theirs, sizeof theirs);
      GRADCOMP_CHECK(theirs == firstStep, CollectiveMismatch, "rank ", rank, " resumes at step ", firstStep,
                     " but rank ", r, " at step ", theirs, " (missing or stale checkpoint)");
    }
  }

  TrainResult result;
  result.firstStep = firstStep;
  std::ofstream metricsOut;
  if (rank == 0 && !options.runDir.empty()) {
    std::filesystem::create_directories(options.runDir);
    std::ofstream(options.runDir + "/config.json") << config.toJson().dump(2) << "\n";
    // Keep the rows before the resume point; the rows after it are run again.
    std::ifstream old(options.runDir + "/metrics.csv");
    std::string line;
    if (firstStep > 0 && old.good() && std::getline(old, line))
      while (std::getline(old, line))
        if (!line.empty()) {
          auto m = StepMetrics::fromCsv(line);
          if (m.step < firstStep) result.metrics.push_back(m);
        }
    metricsOut.open(options.runDir + "/metrics.csv", std::ios::trunc);
    metricsOut << StepMetrics::csvHeader() << "\n";
    for (const auto& m : result.metrics) metricsOut << m.csvRow() << "\n";
    metricsOut.flush();
  }

  std::vector<float> grad(n, 0.0f);
  const uint64_t lastStep = config.stopAfter > 0 ? std::min(config.steps, config.stopAfter) : config.steps;
  double lastAccuracy = -1;
  for (uint64_t step = firstStep; step < lastStep; ++step) {
    const Batch batch = makeBatch(data.train, sampler.batch(step));
    StepMetrics m;
    m.step = step;
    const bool reduceGradients = optimizer->reducesGradients(step);
    const auto t0 = Clock::now();
    if (reduceGradients) reducer.beginStep(grad, static_cast<uint32_t>(step));
    Clock::time_point firstReady{};
    bool anyReady = false;
    const double localLoss = model->lossAndGradient(batch, grad, [&](size_t t) {
      if (!anyReady) firstReady = Clock::now(), anyReady = true;
      if (reduceGradients) reducer.markReady(t);
    });
    const auto backwardEnd = Clock::now();
    m.computeSeconds = std::chrono::duration<double>(backwardEnd - t0).count();
    m.backwardSeconds = anyReady ? std::chrono::duration<double>(backwardEnd - firstReady).count() : 0;
    if (reduceGradients) {
      const ReducerStepReport r = reducer.wait();
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
      const auto r = momentumAllreduce->run(momentum, comm, AllreduceCall{kMomentumTensor, static_cast<uint32_t>(step), false});
      momentumSeconds = since(a);
      m.bytesSent += r.bytesSent;
      m.bytesIntra += r.bytesSentIntra;
      m.bytesInter += r.bytesSentInter;
      m.uncompressedBytes += ringAllreduceBytesPerRank(momentum.size(), ranks);
      m.encodeSeconds += r.cost.encodeSeconds;
      m.decodeSeconds += r.cost.decodeSeconds;
      m.commSeconds += momentumSeconds;
      m.exposedSeconds += momentumSeconds;  // nothing left to overlap it with
    };
    const auto optimizerStart = Clock::now();
    optimizer->step(model->parameters(), grad, step, allreduceMomentum);
    m.computeSeconds += since(optimizerStart) - momentumSeconds;

    float lossBuffer = static_cast<float>(localLoss);
    lossAllreduce->run(std::span(&lossBuffer, 1), comm, AllreduceCall{kLossTensor, static_cast<uint32_t>(step), false});
    m.loss = lossBuffer;
    GRADCOMP_CHECK(std::isfinite(m.loss), TrainingDiverged, "training diverged: the mean loss at step ", step, " is ",
                   m.loss, " (lower the learning rate, or use error feedback with nonfinite=skip)");

    const bool evaluate = step + 1 == config.steps || (config.evalEvery > 0 && (step + 1) % config.evalEvery == 0);
    if (rank == 0 && evaluate && model->classifier()) {
      m.testAccuracy = lastAccuracy = model->accuracy(data.test);
      m.testLoss = model->meanLoss(data.test);
    } else if (rank == 0 && evaluate) {
      m.testLoss = model->meanLoss(data.test);
    }
    m.wallSeconds = since(start);
    if (rank == 0) {
      result.metrics.push_back(m);
      if (metricsOut.is_open()) metricsOut << m.csvRow() << "\n" << std::flush;
      if (options.progress) drawProgress(step + 1, config.steps, m.loss, lastAccuracy, m.wallSeconds, step + 1 - firstStep);
    }
    if (!checkpointPath.empty() && config.checkpointEvery > 0 && (step + 1) % config.checkpointEvery == 0)
      writeCheckpoint(checkpointPath,
                      CheckpointHeader{step + 1, configPrint, static_cast<uint32_t>(ranks), static_cast<uint32_t>(rank)},
                      saveState);
  }
  if (rank == 0 && options.progress && lastStep < config.steps) std::fprintf(stderr, "\n");
  result.completed = lastStep == config.steps;
  result.parameters.assign(model->parameters().begin(), model->parameters().end());

  if (rank == 0 && result.completed) {
    // Timings: medians over the steps after the first (warm-up: first-touch allocations).
    const auto& ms = result.metrics;
    std::vector<double> compute, backward, encode, decode, commTimes, exposed;
    double bytes = 0, uncompressed = 0, commTotal = 0, exposedTotal = 0;
    for (size_t i = 0; i < ms.size(); ++i) {
      bytes += static_cast<double>(ms[i].bytesSent);
      uncompressed += static_cast<double>(ms[i].uncompressedBytes);
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
    const double tCompute = median(compute), tBackward = median(backward);
    const double tCodec = median(encode) + median(decode);
    nlohmann::json s;
    s["name"] = config.name;
    s["model"] = model->name();
    s["dataset"] = config.dataset;
    s["codec"] = config.codec;
    s["ef"] = config.errorFeedback;
    s["algorithm"] = lossy.algorithm;
    s["optimizer"] = config.optimizer;
    s["workers"] = ranks;
    s["bucket_mb"] = config.bucketMB;
    s["steps"] = config.steps;
    s["final_test_accuracy"] = ms.back().testAccuracy;
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
    // Modelled step time on other networks: this run's compute and codec times, the alpha-beta wire
    // time of the same buckets (collectives/README.md), hidden behind backward as far as it fits.
    const int perNode = config.ranksPerNode > 0 ? config.ranksPerNode : 1;
    for (const auto& links : config.modelLinks) {
      const LinkModel lm = LinkModel::parse(links);
      double wire = 0, hideable = tBackward;
      if (oneBit) {
        wire = momentumAllreduce->predictSeconds(n, ranks, perNode, lm);
        hideable = 0;
      } else {
        for (size_t b = 0; b < reducer.buckets().size(); ++b)
          wire += reducer.algorithm(b).predictSeconds(reducer.buckets()[b].elements, ranks, perNode, lm);
      }
      if (!config.overlap) hideable = 0;
      s["model_step_ms[" + links + "]"] = 1e3 * (tCompute + std::max(0.0, wire + tCodec - hideable));
    }
    result.summary = s;
    if (!options.runDir.empty()) std::ofstream(options.runDir + "/summary.json") << s.dump(2) << "\n";
  }
  return result;
}

}  // namespace gradcomp
