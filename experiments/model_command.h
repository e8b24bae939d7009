// `gradcomp model`: per codec and algorithm, the predicted all-reduce time of one gradient on a given
// topology, the communication left exposed after overlapping with the backward pass, and the scaling
// efficiency; optionally the efficiency against world size (1 to 1024 ranks) as CSV for plotting
// (scripts/plot-model).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace gradcomp {

struct ModelOptions {
  int nodes = 16, ranksPerNode = 8;
  std::string links = "intra=900GB/2us,inter=50GB/10us";  // NVLink-class and InfiniBand-class, per GPU
  size_t bytes = size_t{100} << 20;                        // gradient bytes (fp32)
  double computeMs = 100;                                  // forward + backward time per step
  double overlap = 2.0 / 3.0;                              // the share of compute that can hide communication
  std::vector<std::string> codecs;                         // default: none fp16 int8 sign topk:ratio=0.01
  std::vector<std::string> algorithms;                     // default: ring allgather hierarchical tree randomk auto
  std::string errorFeedback = "ef";
  double encodeGBps = 0, decodeGBps = 0;                   // codec speed in GB/s of fp32; 0: measure here
  std::string scalingCsv;                                  // write efficiency vs world size here
  bool csv = false;
  std::vector<std::string> shapes;  // "ROWSxCOLS", repeatable: the gradient as these matrices (replaces bytes)
  std::string lowRank;              // powersgd: rank=,min_compression=
};

void runModelCommand(const ModelOptions& options, std::ostream& out);

}  // namespace gradcomp
