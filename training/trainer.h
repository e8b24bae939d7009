// Data-parallel training on one communicator: every rank runs trainOnCommunicator with the same
// config and data; each trains on its shard, the gradient reducer averages gradients (bucketed,
// compressed, overlapped with backward), and the optimizer steps identically everywhere, so all ranks
// hold the same parameters bit for bit.
//
// Rank 0 writes the run directory: config.json (resolved), metrics.csv (one row per step),
// summary.json when the run completes; every rank writes checkpoint/rank<r>.bin every
// checkpoint_every steps and resumes from it when asked. The summary's test accuracy is quoted two
// ways: final_test_accuracy (the last evaluation) and mean_test_accuracy (the mean of the last five
// evaluations, mean_test_accuracy_evaluations of them), the one to compare runs by.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collectives/communicator.h"
#include "training/dataset.h"
#include "training/train_config.h"

namespace gradcomp {

struct StepMetrics {
  uint64_t step = 0;
  double loss = 0;                     // mean over ranks of the local batch losses
  double testAccuracy = -1, testLoss = -1;  // at evaluation steps (-1 otherwise)
  uint64_t bytesSent = 0, bytesIntra = 0, bytesInter = 0, uncompressedBytes = 0;  // rank 0
  double computeSeconds = 0;   // forward + backward + optimizer
  double backwardSeconds = 0;  // from the first gradient ready to the end of backward
  double encodeSeconds = 0, decodeSeconds = 0, commSeconds = 0, exposedSeconds = 0;
  double wallSeconds = 0;      // since the start of the run (of this process, on resume)
  double efficiency() const { return computeSeconds / (computeSeconds + exposedSeconds); }

  static std::string csvHeader();
  std::string csvRow() const;
  static StepMetrics fromCsv(const std::string& line);  // throws InvalidArgument on a malformed row
};

struct TrainResult {
  bool completed = false;           // all steps ran (false: stop_after)
  uint64_t firstStep = 0;           // > 0 when resumed
  std::vector<StepMetrics> metrics; // rank 0: every step of the run (including the ones before a resume)
  nlohmann::json summary;           // rank 0, when completed
  std::vector<float> parameters;    // final parameters (every rank)
};

// Whether a run continues from its checkpoint: never; if this rank has one (a sweep picking up where it
// was interrupted); or it must (`gradcomp train --resume`: a missing checkpoint is an error naming the
// directory, never a silent start from step 0).
enum class ResumeMode { Never, IfPresent, Required };

struct TrainOptions {
  std::string runDir;                     // empty: write nothing (tests)
  ResumeMode resume = ResumeMode::Never;  // continue from runDir/checkpoint/rank<r>.bin
  bool progress = false;                  // rank 0 draws a progress bar on stderr
};

TrainResult trainOnCommunicator(const TrainConfig& config, const DataSplit& data, Communicator& comm,
                                const TrainOptions& options);

// Loads the data set of a config and splits it (the same on every rank).
DataSplit loadTrainingData(const TrainConfig& config);

// The summary columns, in the order results.csv uses.
std::vector<std::string> summaryColumns(const TrainConfig& config);

// SHA-256 of the resolved configuration minus its name and stop_after: what a run computed. A sweep
// treats a run as finished only if its summary records this same hash.
std::string configSha256(const TrainConfig& config);

}  // namespace gradcomp
