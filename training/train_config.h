// One training run's configuration: what `gradcomp train CONFIG` reads (JSON), what a sweep varies,
// and what a run directory records (resolved, every field explicit). Unknown keys are errors naming
// the key, so a typo never silently trains with a default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gradcomp {

struct TrainConfig {
  std::string name = "run";
  // Model and data.
  std::string model = "mlp:hidden=128x64";
  std::string dataset = "digits";
  std::string dataDir = "data";
  double testFraction = 0.2;
  std::string partition = "iid";  // iid | noniid
  // Workers and network.
  int workers = 4;
  std::string transport = "auto";  // auto (mpi under mpirun, else inproc) | inproc | mpi
  int ranksPerNode = 0;
  std::string linkModel;           // in-process pacing, e.g. "inter=1gbit/50us"
  double timeoutSeconds = 60;
  // Optimisation.
  uint64_t steps = 300;
  size_t batchSize = 32;           // per worker
  std::string optimizer = "sgd:lr=0.1,momentum=0.9";
  // Compression and reduction.
  std::string codec = "none";
  std::string errorFeedback = "none";
  std::string algorithm = "default";  // default: ring where the codec allows it, else allgather
  std::string interAlgorithm = "ring";
  std::string lowRank;  // algorithm powersgd: "rank=2,start_iter=10,..." (collectives/powersgd_allreduce.cc)
  double bucketMB = 25;
  size_t minCompressElements = 1024;
  bool compressOneDimensional = false;
  bool overlap = true;
  // Per-bucket choices, by bucket index (launch order): {"0": {"codec": "fp16", "ef": "none",
  // "algorithm": "ring"}}; any of the three keys.
  nlohmann::json bucketOverrides = nlohmann::json::object();
  // Reproducibility, evaluation, checkpoints.
  uint64_t seed = 1;
  uint64_t evalEvery = 50;         // 0: only at the end
  uint64_t checkpointEvery = 0;    // 0: no checkpoints
  uint64_t stopAfter = 0;          // stop (as if interrupted) after this many steps; 0: run to the end
  // Networks the summary models the step time for (each an inter-node link model).
  std::vector<std::string> modelLinks = {"inter=1gbit/50us", "inter=10gbit/50us"};

  // Throws InvalidArgument naming a bad key and its accepted type and range (every key is range-checked:
  // no negative value wraps around, no fraction is truncated, a non-object config is refused).
  static TrainConfig fromJson(const nlohmann::json& j);
  static bool isStringKey(const std::string& key);  // --set key=text keeps the text as a string
  nlohmann::json toJson() const;
  void validate() const;
};

// Applies "key=value" (JSON value, or a bare string) to a config's JSON: the command line's --set.
void applyOverride(nlohmann::json& config, const std::string& assignment);

}  // namespace gradcomp
