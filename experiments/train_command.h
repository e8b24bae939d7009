// `gradcomp train CONFIG` (one run) and `gradcomp sweep SWEEP` (the cartesian product of lists in a
// sweep file, resumable), on in-process workers (threads, optionally paced by a link model) or on the
// MPI ranks of an mpirun job (also across the emulated cluster).
//
// A sweep file is JSON:
//   { "base":  { ...training config (training/train_config.h)... },
//     "grid":  { "key": [v1, v2, ...], ... },            // cartesian product
//     "cases": [ { "name": "sign+ef", "codec": "sign", "ef": "ef" }, ... ] }   // optional, zipped
// Every run is (case x grid point); it is named from the case name and the grid values and stored in
// OUT/runs/NAME/ (config.json, metrics.csv, summary.json, checkpoint/). A run whose summary records the
// same resolved configuration (config_sha256) is skipped; one stored from another configuration (the
// sweep file or --set changed) is run again from the start (or, with --no-rerun, is an error); an
// unfinished one with a checkpoint resumes. A failed run does not stop the others: the sweep finishes,
// lists the failures and exits non-zero. OUT/results.csv has one summary row per run.
//
// `gradcomp train` refuses to write into a run directory that holds an earlier run unless --overwrite
// (start again) or --resume (continue it) is given; an --out that is a file or cannot be written is an
// error naming it.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collectives/communicator.h"
#include "training/trainer.h"

namespace gradcomp {

struct TrainCommandOptions {
  std::string file;                 // config (train) or sweep file (sweep)
  std::vector<std::string> sets;    // key=value overrides applied to the config / the sweep's base
  std::string out;                  // train: the run directory's parent; sweep: the sweep directory
  bool resume = false;              // train: continue from the run's checkpoint (which must exist)
  bool overwrite = false;           // train: replace an existing run directory's results
  bool noRerun = false;             // sweep: a stored run made from another config is an error, not rerun
  bool progress = false;
};

// Runs one configuration; `mpiWorld` is the MPI world under mpirun, null for in-process workers.
// Returns rank 0's result (other MPI ranks: their own, without metrics).
TrainResult runTraining(const TrainConfig& config, Communicator* mpiWorld, const TrainOptions& options);

void runTrainCommand(const TrainCommandOptions& options, Communicator* mpiWorld, std::ostream& out);
// Returns the number of failed runs (0: all finished).
size_t runSweepCommand(const TrainCommandOptions& options, Communicator* mpiWorld, std::ostream& out);

// The runs of a sweep file: resolved configs, named.
std::vector<nlohmann::json> expandSweep(const nlohmann::json& sweep);

// The summary table (what the demo prints): accuracy, bytes per step, ratio, codec and modelled times.
void printSummaryTable(const std::vector<nlohmann::json>& summaries, std::ostream& out);

}  // namespace gradcomp
