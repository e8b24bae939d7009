// The cost model: "when does compression pay". An all-reduce of n fp32 elements on a topology costs the
// algorithm's alpha-beta wire time (AllreduceAlgorithm::predictSeconds, the formulas of
// collectives/README.md) plus its codec work (AllreduceAlgorithm::codecWork) at the codec's measured
// or given speed. With data-parallel overlap, communication hides behind the backward pass:
//   exposed = max(0, T_allreduce - overlap * T_compute),  efficiency = T_compute / (T_compute + exposed).
#pragma once

#include <string>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/link_model.h"

namespace gradcomp {

struct Topology {
  int nodes = 1, ranksPerNode = 1;
  LinkModel links;
  int ranks() const { return nodes * ranksPerNode; }
};

struct CodecSpeed {
  double encodeSecondsPerElement = 0, decodeSecondsPerElement = 0;
  // A rotate=hadamard codec: its speeds less the rotation, and one rotation pass (the mean of forward and
  // inverse), which is how the compressed ring runs it (CodecWork::withoutRotation). 0 where not known
  // (speeds given rather than measured): the ring's work is then charged at the rotated codec's speeds,
  // a transform per element encoded and per element decoded where the ring makes two tensors' worth per
  // rank (three with ef): (P-1)/P of a tensor's rotation too much without ef, 1/P too little with it.
  double unrotatedEncodeSecondsPerElement = 0, unrotatedDecodeSecondsPerElement = 0, rotateSecondsPerElement = 0;
};

// Single-thread encode (through the error-feedback policy) and decode-accumulate speed of one codec on
// this machine: median of `repeats` runs on n normal values, at the steady step (past DGC's warm-up,
// as the wire time: PayloadCodec::steadyStep). A rotated codec's speeds without the rotation and the
// rotation's own are measured too.
CodecSpeed measureCodecSpeed(const std::string& codec, const std::string& errorFeedback, size_t n = size_t{1} << 22,
                             int repeats = 3);

struct Prediction {
  double wireSeconds = 0, codecSeconds = 0, allreduceSeconds = 0, exposedSeconds = 0, efficiency = 1;
};

Prediction predict(const AllreduceAlgorithm& algorithm, const CodecSpeed& speed, size_t numElements,
                   const Topology& topology, double computeSeconds, double overlap);

// The candidate (algorithm names) with the smallest predicted all-reduce time for this codec; the ones
// that refuse the codec, or the topology (uneven nodes), are skipped. Throws if none is left.
std::string pickAlgorithm(const std::vector<std::string>& candidates, const AllreduceConfig& base,
                          const CodecSpeed& speed, size_t numElements, const Topology& topology);

// The algorithms `auto` chooses among.
const std::vector<std::string>& autoCandidates();

struct CodecPrediction {
  std::string algorithm;  // the one predicted (auto: the pick)
  Prediction prediction;
};

// `base` (codec, error feedback, low-rank options, matrices) under `algorithm` ("auto": the fastest of
// autoCandidates()). Throws InvalidArgument when the algorithm cannot carry the codec or the topology.
CodecPrediction predictCodec(const AllreduceConfig& base, const std::string& algorithm, const CodecSpeed& speed,
                             size_t numElements, const Topology& topology, double computeSeconds, double overlap);

}  // namespace gradcomp
