#include "experiments/model_command.h"

#include "experiments/allreduce_perf_command.h"

#include <fstream>
#include <iomanip>
#include <map>

#include "core/error.h"
#include "collectives/cost_model.h"

namespace gradcomp {
namespace {

struct Row {
  std::string codec, algorithm;
  Prediction p;
};

}  // namespace

void runModelCommand(const ModelOptions& o, std::ostream& out) {
  GRADCOMP_CHECK_ARG(o.nodes >= 1 && o.ranksPerNode >= 1, "nodes and ranks per node must be >= 1");
  GRADCOMP_CHECK_ARG(o.bytes >= 4, "gradient bytes must be >= 4");
  const Topology topo{o.nodes, o.ranksPerNode, LinkModel::parse(o.links)};
  std::vector<MatrixSegment> matrices;
  uint64_t shapeElements = 0;
  for (const std::string& s : o.shapes) {
    const auto [rows, cols] = parseShape(s);
    matrices.push_back({shapeElements, rows * cols, rows});
    shapeElements += rows * cols;
  }
  const size_t n = matrices.empty() ? o.bytes / 4 : static_cast<size_t>(shapeElements);
  const double compute = o.computeMs * 1e-3;
  const std::vector<std::string> codecs =
      o.codecs.empty() ? std::vector<std::string>{"none", "fp16", "int8", "sign", "topk:ratio=0.01", "randomk:ratio=0.01"}
                       : o.codecs;
  const std::vector<std::string> algorithms =
      o.algorithms.empty() ? std::vector<std::string>{"ring", "allgather", "hierarchical", "tree", "randomk", "auto"}
                           : o.algorithms;

  std::map<std::string, CodecSpeed> speeds;
  for (const auto& codec : codecs) {
    const std::string ef = codec == "none" ? "none" : o.errorFeedback;
    speeds[codec] = o.encodeGBps > 0 && o.decodeGBps > 0
                        ? CodecSpeed{4.0 / (o.encodeGBps * 1e9), 4.0 / (o.decodeGBps * 1e9)}
                        : measureCodecSpeed(codec, ef);
  }

  auto base = [&](const std::string& codec) {
    AllreduceConfig c;
    c.codec = codec;
    c.errorFeedback = codec == "none" ? "none" : o.errorFeedback;
    c.lowRank = o.lowRank;
    c.modelMatrices = matrices;
    return c;
  };

  std::vector<Row> rows;
  for (const auto& codec : codecs)
    for (const auto& algorithm : algorithms) {
      CodecPrediction p;
      try {
        p = predictCodec(base(codec), algorithm, speeds[codec], n, topo, compute, o.overlap);
      } catch (const InvalidArgument&) {
        continue;  // not a pair this algorithm (or this topology) carries
      }
      rows.push_back({codec, algorithm == "auto" ? "auto->" + p.algorithm : algorithm, p.prediction});
    }

  if (o.csv) {
    out << "codec,algorithm,ranks,bytes,wire_ms,codec_ms,allreduce_ms,exposed_ms,efficiency\n";
    for (const auto& r : rows)
      out << r.codec << ',' << r.algorithm << ',' << topo.ranks() << ',' << n * 4 << ',' << r.p.wireSeconds * 1e3
          << ',' << r.p.codecSeconds * 1e3 << ',' << r.p.allreduceSeconds * 1e3 << ',' << r.p.exposedSeconds * 1e3
          << ',' << r.p.efficiency << '\n';
  } else {
    out << "# gradcomp model: " << o.nodes << " nodes x " << o.ranksPerNode << " ranks, " << topo.links.describe()
        << ", " << n * 4 << " B of gradient" << (matrices.empty() ? "" : " (the --shape matrices)") << ", compute " << o.computeMs << " ms/step, overlap " << o.overlap
        << ", codec speed " << (o.encodeGBps > 0 ? "given" : "measured on this CPU, one thread") << "\n";
    out << std::left << std::setw(22) << "codec" << std::setw(20) << "algorithm" << std::right << std::setw(11)
        << "wire(ms)" << std::setw(11) << "codec(ms)" << std::setw(13) << "allred.(ms)" << std::setw(13)
        << "exposed(ms)" << std::setw(11) << "efficiency" << "\n";
    for (const auto& r : rows)
      out << std::left << std::setw(22) << r.codec << std::setw(20) << r.algorithm << std::right << std::fixed
          << std::setprecision(2) << std::setw(11) << r.p.wireSeconds * 1e3 << std::setw(11) << r.p.codecSeconds * 1e3
          << std::setw(13) << r.p.allreduceSeconds * 1e3 << std::setw(13) << r.p.exposedSeconds * 1e3
          << std::setprecision(3) << std::setw(11) << r.p.efficiency << std::defaultfloat << "\n";
  }

  if (!o.scalingCsv.empty()) {
    std::ofstream f(o.scalingCsv);
    GRADCOMP_CHECK_ARG(f.good(), "cannot write ", o.scalingCsv);
    f << "ranks,nodes,ranks_per_node,codec,algorithm,allreduce_ms,exposed_ms,efficiency\n";
    for (int ranks = 1; ranks <= 1024; ranks *= 2) {
      Topology t = topo;
      t.ranksPerNode = std::min(ranks, o.ranksPerNode);
      t.nodes = ranks / t.ranksPerNode;
      for (const auto& codec : codecs)
        for (const auto& algorithm : algorithms) {
          Prediction p;
          try {
            p = predictCodec(base(codec), algorithm, speeds[codec], n, t, compute, o.overlap).prediction;
          } catch (const InvalidArgument&) {
            continue;
          }
          f << ranks << ',' << t.nodes << ',' << t.ranksPerNode << ',' << codec << ','
            << (algorithm == "auto" ? "auto" : algorithm) << ',' << p.allreduceSeconds * 1e3 << ','
            << p.exposedSeconds * 1e3 << ',' << p.efficiency << '\n';
        }
    }
  }
}

}  // namespace gradcomp
