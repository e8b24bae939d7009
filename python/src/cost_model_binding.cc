// gradcomp._C.codec_speed(s) / predict_allreduce: the C++ cost model (collectives/cost_model.h) from Python,
// so the DDP hook's diagnosis and the reproductions model a step on a named link with the same alpha-beta
// formulas and codec work as `gradcomp model` and `gradcomp train`'s model_step_ms.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <cmath>

#include "bindings.h"
#include "collectives/cost_model.h"
#include "core/error.h"

namespace gradcomp::python {

namespace {

CodecSpeed measured(const std::string& codec, const std::string& errorFeedback, uint64_t n, int repeats) {
  GRADCOMP_CHECK_ARG(n >= 1024 && n <= (uint64_t{1} << 28), "codec_speed: n must be in [1024, 2^28], got ", n);
  GRADCOMP_CHECK_ARG(repeats >= 1 && repeats <= 100, "codec_speed: repeats must be in [1, 100], got ", repeats);
  nb::gil_scoped_release release;
  return measureCodecSpeed(codec, errorFeedback, static_cast<size_t>(n), repeats);
}

std::pair<double, double> codecSpeed(const std::string& codec, const std::string& errorFeedback, uint64_t n, int repeats) {
  const CodecSpeed s = measured(codec, errorFeedback, n, repeats);
  return {s.encodeSecondsPerElement, s.decodeSecondsPerElement};
}

nb::dict codecSpeeds(const std::string& codec, const std::string& errorFeedback, uint64_t n, int repeats) {
  const CodecSpeed s = measured(codec, errorFeedback, n, repeats);
  nb::dict out;
  out["encode"] = s.encodeSecondsPerElement;
  out["decode"] = s.decodeSecondsPerElement;
  out["unrotated_encode"] = s.unrotatedEncodeSecondsPerElement;
  out["unrotated_decode"] = s.unrotatedDecodeSecondsPerElement;
  out["rotate"] = s.rotateSecondsPerElement;
  return out;
}

nb::dict predictAllreduce(const std::string& codec, uint64_t elements, int nodes, const std::string& links,
                          int ranksPerNode, const std::string& algorithm, const std::string& errorFeedback,
                          double computeSeconds, double overlap, double encodeSecondsPerElement,
                          double decodeSecondsPerElement, double unrotatedEncodeSecondsPerElement,
                          double unrotatedDecodeSecondsPerElement, double rotateSecondsPerElement) {
  GRADCOMP_CHECK_ARG(elements >= 1, "predict_allreduce: elements must be >= 1");
  GRADCOMP_CHECK_ARG(nodes >= 1 && nodes <= (1 << 20), "predict_allreduce: nodes must be in [1, 2^20], got ", nodes);
  GRADCOMP_CHECK_ARG(ranksPerNode >= 1 && ranksPerNode <= 4096,
                     "predict_allreduce: ranks_per_node must be in [1, 4096], got ", ranksPerNode);
  GRADCOMP_CHECK_ARG(std::isfinite(computeSeconds) && computeSeconds >= 0,
                     "predict_allreduce: compute_seconds must be a finite time >= 0");
  for (const double s : {encodeSecondsPerElement, decodeSecondsPerElement, unrotatedEncodeSecondsPerElement,
                         unrotatedDecodeSecondsPerElement, rotateSecondsPerElement})
    GRADCOMP_CHECK_ARG(std::isfinite(s) && s >= 0, "predict_allreduce: codec seconds per element must be finite and >= 0, got ", s);
  const Topology topology{nodes, ranksPerNode, LinkModel::parse(links)};
  AllreduceConfig base;
  base.codec = codec;
  base.errorFeedback = errorFeedback;
  const CodecSpeed speed{encodeSecondsPerElement, decodeSecondsPerElement, unrotatedEncodeSecondsPerElement,
                         unrotatedDecodeSecondsPerElement, rotateSecondsPerElement};
  const CodecPrediction p = predictCodec(base, algorithm, speed,
                                         static_cast<size_t>(elements), topology, computeSeconds, overlap);
  nb::dict out;
  out["algorithm"] = p.algorithm;
  out["wire_seconds"] = p.prediction.wireSeconds;
  out["codec_seconds"] = p.prediction.codecSeconds;
  out["allreduce_seconds"] = p.prediction.allreduceSeconds;
  out["exposed_seconds"] = p.prediction.exposedSeconds;
  out["efficiency"] = p.prediction.efficiency;
  return out;
}

}  // namespace

void bindCostModel(nb::module_& m) {
  m.def("codec_speed", &codecSpeed, nb::arg("codec"), nb::arg("error_feedback") = "none",
        nb::arg("n") = uint64_t{1} << 20, nb::arg("repeats") = 3,
        "Single-thread (encode, decode-accumulate) seconds per element of a codec on this CPU: the median of "
        "`repeats` runs on n N(0, 1) values. (0, 0) for the lossless fp32 codec 'none'.");
  m.def("codec_speeds", &codecSpeeds, nb::arg("codec"), nb::arg("error_feedback") = "none",
        nb::arg("n") = uint64_t{1} << 20, nb::arg("repeats") = 3,
        "codec_speed's measurement in full: encode and decode, and for a rotate=hadamard codec also "
        "unrotated_encode, unrotated_decode (the codec less its rotation, as the compressed ring's hops run "
        "it) and rotate (one rotation pass), seconds per element; 0 where a codec has no such part.");
  m.def("predict_allreduce", &predictAllreduce, nb::arg("codec"), nb::arg("elements"), nb::arg("nodes"),
        nb::arg("links"), nb::arg("ranks_per_node") = 1, nb::arg("algorithm") = "auto",
        nb::arg("error_feedback") = "none", nb::arg("compute_seconds") = 0.0, nb::arg("overlap") = 0.0,
        nb::arg("encode_seconds_per_element") = 0.0, nb::arg("decode_seconds_per_element") = 0.0,
        nb::arg("unrotated_encode_seconds_per_element") = 0.0, nb::arg("unrotated_decode_seconds_per_element") = 0.0,
        nb::arg("rotate_seconds_per_element") = 0.0,
        "The cost model's all-reduce of `elements` fp32 values: alpha-beta wire time on `links` "
        "('inter=1gbit/50us'), plus the codec work at the given speed, hidden behind overlap x compute. "
        "The compressed ring sums a rotated codec in the rotated domain: given the unrotated and rotation "
        "speeds (codec_speeds), its hops are charged at the first two and its own rotations at the third; "
        "without them, at the rotated codec's speeds. "
        "Returns algorithm, wire_seconds, codec_seconds, allreduce_seconds, exposed_seconds, efficiency; "
        "InvalidArgument when the algorithm cannot carry the codec.");
}

}  // namespace gradcomp::python
