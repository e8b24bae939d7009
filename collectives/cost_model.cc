#include "collectives/cost_model.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <tuple>
#include <utility>

#include "compressors/registry.h"
#include "core/error.h"
#include "core/random_data.h"
#include "core/timing.h"
#include "kernels/cpu/hadamard_rotation.h"

namespace gradcomp {

CodecSpeed measureCodecSpeed(const std::string& codec, const std::string& errorFeedback, size_t n, int repeats) {
  PayloadCodec payload(codec, errorFeedback);
  if (payload.raw()) return {};
  // A timing run: what the policy would warn about (plain ef with a codec that is not contractive) is the
  // caller's to say for the run it configures, not for this measurement.
  payload.errorFeedback().setWarningSink([](const std::string&) {});
  const auto x = normalVector(n, 17);
  std::vector<float> out(n, 0.0f);
  WireBuffer buf;
  const EncodeContext ctx = payload.steadyStep(1);  // the step encodedBytes predicts the bytes of
  // Room for the rotated codec's payload and for the hops' (the codec less its rotation), whichever is larger.
  const auto wire = buf.span(std::max(payload.maxBytes(n, ctx), payload.maxHopBytes(n, ctx)));
  const double count = static_cast<double>(n);
  // Seconds per element to encode and to decode-accumulate with the codec active in `payload`.
  const auto encodeDecode = [&] {
    size_t bytes = 0;
    const double enc = medianSeconds(repeats, [&] { bytes = payload.encode(x, wire, ctx); });
    const double dec = medianSeconds(repeats, [&] { payload.decode(wire.first(bytes), out, DecodeMode::Accumulate); });
    return std::pair{enc / count, dec / count};
  };
  CodecSpeed s;
  std::tie(s.encodeSecondsPerElement, s.decodeSecondsPerElement) = encodeDecode();
  if (const uint64_t b = payload.rotationBlock()) {
    {
      const PayloadCodec::RotatedDomain unrotated(payload);
      std::tie(s.unrotatedEncodeSecondsPerElement, s.unrotatedDecodeSecondsPerElement) = encodeDecode();
    }
    const scalar::RotationKey key{1, ctx.step, 0};
    std::vector<float> y(n);
    const double forward = medianSeconds(repeats, [&] { cpu::rotateForward(x.data(), y.data(), n, b, key, 1.0f); });
    const double inverse = medianSeconds(repeats, [&] { cpu::rotateInverse(y.data(), out.data(), n, b, key, 1.0f); });
    s.rotateSecondsPerElement = (forward + inverse) / 2 / count;
  }
  return s;
}

Prediction predict(const AllreduceAlgorithm& algorithm, const CodecSpeed& speed, size_t numElements,
                   const Topology& topology, double computeSeconds, double overlap) {
  GRADCOMP_CHECK_ARG(overlap >= 0 && overlap <= 1, "overlap must be in [0, 1], got ", overlap);
  GRADCOMP_CHECK_ARG(computeSeconds >= 0, "compute time must be >= 0");
  Prediction p;
  p.wireSeconds = algorithm.predictSeconds(numElements, topology.ranks(), topology.ranksPerNode, topology.links);
  const auto work = algorithm.codecWork(numElements, topology.ranks(), topology.ranksPerNode);
  if (work.withoutRotation && speed.rotateSecondsPerElement > 0)
    p.codecSeconds = work.encodeElements * speed.unrotatedEncodeSecondsPerElement +
                     work.decodeElements * speed.unrotatedDecodeSecondsPerElement +
                     work.rotateElements * speed.rotateSecondsPerElement;
  else
    p.codecSeconds = work.encodeElements * speed.encodeSecondsPerElement + work.decodeElements * speed.decodeSecondsPerElement;
  p.allreduceSeconds = p.wireSeconds + p.codecSeconds;
  p.exposedSeconds = std::max(0.0, p.allreduceSeconds - overlap * computeSeconds);
  p.efficiency = computeSeconds > 0 ? computeSeconds / (computeSeconds + p.exposedSeconds) : 0.0;
  return p;
}

std::string pickAlgorithm(const std::vector<std::string>& candidates, const AllreduceConfig& base,
                          const CodecSpeed& speed, size_t numElements, const Topology& topology) {
  std::string best;
  double bestSeconds = std::numeric_limits<double>::infinity();
  for (const auto& name : candidates) {
    if (name == "hierarchical" && (topology.nodes < 2 || topology.ranksPerNode < 2)) continue;
    AllreduceConfig c = base;
    c.algorithm = name;
    std::unique_ptr<AllreduceAlgorithm> algo;
    try {
      algo = AllreduceAlgorithm::make(c);
    } catch (const InvalidArgument&) {
      continue;  // this algorithm cannot carry the codec
    }
    const double t = predict(*algo, speed, numElements, topology, 0, 0).allreduceSeconds;
    if (t < bestSeconds) bestSeconds = t, best = name;
  }
  GRADCOMP_CHECK_ARG(!best.empty(), "no candidate algorithm carries codec '", base.codec, "'");
  return best;
}

const std::vector<std::string>& autoCandidates() {
  static const std::vector<std::string> names = {"ring", "allgather", "hierarchical", "tree", "randomk"};
  return names;
}

CodecPrediction predictCodec(const AllreduceConfig& base, const std::string& algorithm, const CodecSpeed& speed,
                             size_t numElements, const Topology& topology, double computeSeconds, double overlap) {
  GRADCOMP_CHECK_ARG(algorithm != "hierarchical" || (topology.nodes >= 2 && topology.ranksPerNode >= 2),
                     "hierarchical needs >= 2 nodes of >= 2 ranks");
  AllreduceConfig c = base;
  c.algorithm = algorithm == "auto" ? pickAlgorithm(autoCandidates(), base, speed, numElements, topology) : algorithm;
  const auto algo = AllreduceAlgorithm::make(c);
  return {c.algorithm, predict(*algo, speed, numElements, topology, computeSeconds, overlap)};
}

}  // namespace gradcomp
