#include "experiments/allreduce_perf_command.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "collectives/allreduce.h"
#include "collectives/inprocess_communicator.h"
#include "collectives/small_collectives.h"
#include "core/error.h"
#include "collectives/cost_model.h"
#include "core/random_data.h"

namespace gradcomp {
namespace {

struct Row {
  size_t bytes;
  std::string codec, algorithm;
  int ranks;
  double seconds, encodeSeconds, decodeSeconds;
  uint64_t wireBytes, interBytes;
  double ratio, relError;
  double modelSeconds;  // link model's wire time + measured encode/decode (0 without a link model)
};

// The largest value over the ranks (the collective is as slow as its slowest rank).
std::vector<double> maxOverRanks(Communicator& comm, std::vector<double> mine) {
  const Communicator::OperationScope scope(comm, "allreduce-perf statistics");
  const auto all = allgatherSmall(comm, std::as_bytes(std::span(mine)), makeTag(scope.sequence(), 0xF0),
                                  "allreduce-perf statistics");
  std::vector<double> out(mine.size(), -1e300);
  for (int r = 0; r < comm.size(); ++r)
    for (size_t i = 0; i < mine.size(); ++i) {
      double v;
      std::memcpy(&v, all.data() + (static_cast<size_t>(r) * mine.size() + i) * sizeof(double), sizeof(double));
      out[i] = std::max(out[i], v);
    }
  return out;
}

std::vector<size_t> sizesOf(const AllreducePerfOptions& o) {
  if (!o.shape.empty()) {
    const auto [rows, cols] = parseShape(o.shape);
    return {static_cast<size_t>(rows * cols * 4)};
  }
  GRADCOMP_CHECK_ARG(o.minBytes >= 4 && o.maxBytes >= o.minBytes, "sizes: need 4 <= -b (", o.minBytes, ") <= -e (",
                     o.maxBytes, ")");
  GRADCOMP_CHECK_ARG(o.stepFactor > 1, "-f must be > 1, got ", o.stepFactor);
  std::vector<size_t> s;
  for (double b = static_cast<double>(o.minBytes); b <= static_cast<double>(o.maxBytes) * 1.0000001; b *= o.stepFactor)
    s.push_back(static_cast<size_t>(b) / 4 * 4);
  return s;
}

void printTable(const std::vector<Row>& rows, const AllreducePerfOptions& o, const std::string& transport,
                std::ostream& out) {
  if (o.csv) {
    out << "bytes,count,codec,algorithm,ranks,time_us,algbw_GBps,busbw_GBps,wire_bytes_per_rank,"
           "inter_node_bytes_per_rank,ratio_vs_ring,"
           "encode_us,decode_us,relative_error,model_us\n";
    for (const auto& r : rows) {
      const double algbw = static_cast<double>(r.bytes) / r.seconds / 1e9;
      out << r.bytes << ',' << r.bytes / 4 << ',' << r.codec << ',' << r.algorithm << ',' << r.ranks << ','
          << r.seconds * 1e6 << ',' << algbw << ',' << algbw * 2.0 * (r.ranks - 1) / r.ranks << ',' << r.wireBytes
          << ',' << r.interBytes << ',' << r.ratio << ',' << r.encodeSeconds * 1e6 << ',' << r.decodeSeconds * 1e6 << ',';
      if (r.relError >= 0) out << r.relError;
      out << ',';
      if (r.modelSeconds > 0) out << r.modelSeconds * 1e6;
      out << '\n';
    }
    return;
  }
  out << "# gradcomp allreduce-perf: " << transport << ", " << (rows.empty() ? 0 : rows[0].ranks) << " ranks, op "
      << o.op << ", warm-up " << o.warmup << ", median of " << o.iterations << " iterations of the slowest rank\n";
  out << std::right << std::setw(12) << "bytes" << std::setw(24) << "codec" << std::setw(17) << "algorithm"
      << std::setw(6) << "ranks" << std::setw(12) << "time(us)" << std::setw(10) << "algbw" << std::setw(10)
      << "busbw" << std::setw(14) << "wire B/rank" << std::setw(14) << "inter B/rank" << std::setw(9) << "ratio" << std::setw(12) << "codec(us)"
      << std::setw(11) << "rel.err" << std::setw(12) << "time/model" << "\n";
  for (const auto& r : rows) {
    const double algbw = static_cast<double>(r.bytes) / r.seconds / 1e9;
    out << std::setw(12) << r.bytes << std::setw(24) << r.codec << std::setw(17) << r.algorithm << std::setw(6)
        << r.ranks << std::fixed << std::setprecision(1) << std::setw(12) << r.seconds * 1e6 << std::setprecision(3)
        << std::setw(10) << algbw << std::setw(10) << algbw * 2.0 * (r.ranks - 1) / r.ranks << std::setw(14)
        << r.wireBytes << std::setw(14) << r.interBytes << std::setprecision(2) << std::setw(9) << r.ratio << std::setprecision(1) << std::setw(12)
        << (r.encodeSeconds + r.decodeSeconds) * 1e6;
    if (r.relError >= 0) out << std::scientific << std::setprecision(2) << std::setw(11) << r.relError;
    else out << std::setw(11) << "-";
    if (r.modelSeconds > 0) out << std::fixed << std::setprecision(3) << std::setw(12) << r.seconds / r.modelSeconds;
    else out << std::setw(12) << "-";
    out << std::defaultfloat << "\n";
  }
}

}  // namespace

void runAllreducePerf(const AllreducePerfOptions& o, Communicator& comm, std::ostream& out) {
  GRADCOMP_CHECK_ARG(o.iterations >= 1 && o.warmup >= 0, "iterations must be >= 1 and warm-up >= 0");
  const std::vector<std::string> codecs = o.codecs.empty() ? std::vector<std::string>{"none"} : o.codecs;
  const std::vector<std::string> algorithms =
      o.algorithms.empty() ? std::vector<std::string>{"ring"} : o.algorithms;
  std::vector<std::pair<std::string, std::string>> pairs;  // (algorithm, codec), in output order
  for (const auto& c : o.cases) {
    const auto slash = c.find('/');
    GRADCOMP_CHECK_ARG(slash != std::string::npos, "--case '", c, "' is not algorithm/codec");
    pairs.emplace_back(c.substr(0, slash), c.substr(slash + 1));
  }
  if (pairs.empty())
    for (const auto& a : algorithms)
      for (const auto& c : codecs) pairs.emplace_back(a, c);
  const int p = comm.size();
  const LinkModel links = LinkModel::parse(o.linkModel);
  const int rpn = comm.uniformRanksPerNode();
  std::vector<Row> rows;
  const std::vector<size_t> sizes = sizesOf(o);
  const uint64_t matrixRows = o.shape.empty() ? 0 : parseShape(o.shape).first;
  for (const size_t bytes : sizes) {
    const size_t n = bytes / 4;
    const std::vector<float> input = normalVector(n, o.seed * 7919 + static_cast<uint64_t>(comm.rank()));
    std::vector<float> x(n);
    for (const auto& [algorithmName, codec] : pairs) {
      {
        AllreduceConfig cfg;
        cfg.algorithm = algorithmName == "vendor-blocking" ? "vendor" : algorithmName;
        cfg.blockingVendor = algorithmName == "vendor-blocking";
        cfg.codec = codec;
        // powersgd is lossy with any carrier, so its error feedback applies with codec none too.
        cfg.errorFeedback = codec == "none" && cfg.algorithm != "powersgd" ? "none" : o.errorFeedback;
        cfg.interAlgorithm = o.interAlgorithm;
        cfg.lowRank = o.lowRank;
        cfg.op = parseReduceOp(o.op);
        cfg.seed = o.seed;
        if (algorithmName == "auto") {
          // The cost model's pick for this size, for this codec and error feedback (set above: the pick
          // depends on which algorithms carry the codec and on its speed): every rank uses the slowest
          // rank's codec speed and so makes the same choice (the agreement check would refuse different
          // ones).
          CodecSpeed speed{};
          if (codec != "none") {
            const CodecSpeed mine = measureCodecSpeed(codec, cfg.errorFeedback, std::min<size_t>(n, 1 << 22), 3);
            const auto slowest = maxOverRanks(
                comm, {mine.encodeSecondsPerElement, mine.decodeSecondsPerElement, mine.unrotatedEncodeSecondsPerElement,
                       mine.unrotatedDecodeSecondsPerElement, mine.rotateSecondsPerElement});
            speed = {slowest[0], slowest[1], slowest[2], slowest[3], slowest[4]};
          }
          const int perNode = std::max(1, comm.uniformRanksPerNode());
          const Topology topo{p / perNode, perNode, links};
          try {
            cfg.algorithm = pickAlgorithm({"ring", "tree", "allgather", "hierarchical", "randomk"}, cfg, speed, n, topo);
          } catch (const InvalidArgument& e) {
            if (comm.rank() == 0 && bytes == sizes.front()) std::cerr << "# skipped: " << e.what() << "\n";
            continue;
          }
        }
        std::unique_ptr<AllreduceAlgorithm> algo;
        try {
          algo = AllreduceAlgorithm::make(cfg);
        } catch (const InvalidArgument& e) {
          if (comm.rank() == 0 && bytes == sizes.front()) std::cerr << "# skipped: " << e.what() << "\n";
          continue;
        }
        std::vector<double> times;
        AllreduceReport last;
        for (int it = 0; it < o.warmup + o.iterations; ++it) {
          std::copy(input.begin(), input.end(), x.begin());
          // Start together: otherwise a rank's time includes waiting for the slowest to arrive.
          maxOverRanks(comm, {0.0});
          const auto t0 = Clock::now();
          last = algo->run(x, comm, {0, static_cast<uint32_t>(it), false, matrixRows});
          const double t = std::chrono::duration<double>(Clock::now() - t0).count();
          if (it >= o.warmup) times.push_back(maxOverRanks(comm, {t})[0]);
        }
        std::nth_element(times.begin(), times.begin() + static_cast<ptrdiff_t>(times.size() / 2), times.end());
        double relError = -1;
        if (o.check) {
          std::copy(input.begin(), input.end(), x.begin());
          relError = algo->run(x, comm, {0, static_cast<uint32_t>(o.warmup + o.iterations), true, matrixRows}).relativeError;
        }
        const auto stats = maxOverRanks(comm, {static_cast<double>(last.bytesSent), last.cost.encodeSeconds,
                                               last.cost.decodeSeconds, static_cast<double>(last.bytesSentInter)});
        const double ringBytes = 2.0 * (p - 1) / p * static_cast<double>(bytes);
        const std::string shown = algorithmName == "auto" ? "auto->" + cfg.algorithm
                                  : algorithmName == "hierarchical" ? "hier/" + o.interAlgorithm
                                                                    : algorithmName;
        rows.push_back({bytes, codec, shown, p,
                        times[times.size() / 2], stats[1], stats[2], static_cast<uint64_t>(stats[0]),
                        static_cast<uint64_t>(stats[3]),
                        stats[0] > 0 ? ringBytes / stats[0] : 1.0, relError,
                        links.active() ? algo->predictSeconds(n, p, rpn, links) + stats[1] + stats[2] : 0.0});
      }
    }
  }
  // A sweep skips the pairs that do not go together, but a run where none did measured nothing: a typo in
  // a codec or an option is an error, not an empty table with exit status 0.
  GRADCOMP_CHECK_ARG(!rows.empty(), "allreduce-perf: no case ran: every algorithm/codec pair was refused (the '# skipped' ",
                     "lines say why)");
  if (comm.rank() == 0) printTable(rows, o, comm.transportName(), out);
}

std::pair<uint64_t, uint64_t> parseShape(const std::string& text) {
  const size_t x = text.find('x');
  uint64_t rows = 0, cols = 0;
  bool ok = x != std::string::npos && x > 0 && x + 1 < text.size() &&
            text.find_first_not_of("0123456789x") == std::string::npos && text.find('x', x + 1) == std::string::npos &&
            x <= 10 && text.size() - x - 1 <= 10;
  if (ok) {
    rows = std::stoull(text.substr(0, x));
    cols = std::stoull(text.substr(x + 1));
    ok = rows >= 1 && cols >= 1 && rows < (uint64_t{1} << 31) && cols < (uint64_t{1} << 31) &&
         rows * cols <= (uint64_t{1} << 31);
  }
  GRADCOMP_CHECK_ARG(ok, "--shape '", text, "' is not ROWSxCOLS with both in [1, 2^31) and at most 2^31 elements");
  return {rows, cols};
}

void runAllreducePerfInProcess(const AllreducePerfOptions& o, std::ostream& out) {
  GRADCOMP_CHECK_ARG(o.ranks >= 1, "--ranks must be >= 1");
  CommunicatorOptions co;
  co.timeoutSeconds = o.timeoutSeconds;
  co.ranksPerNode = o.ranksPerNode;
  const LinkModel links = LinkModel::parse(o.linkModel);
  const auto errors = runInProcess(o.ranks, [&](Communicator& comm) { runAllreducePerf(o, comm, out); }, co, links);
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace gradcomp
