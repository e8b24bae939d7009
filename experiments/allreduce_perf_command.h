// `gradcomp allreduce-perf`, in the style of nccl-tests: a sweep of message sizes x codecs x
// algorithms, in-process (--ranks N, optionally paced by a link model) or one process per rank under
// mpirun. One row per case: size, codec, algorithm, ranks, time (median over iterations of the slowest
// rank), algbw, busbw (algbw x 2(n-1)/n), data bytes sent per rank, the ratio of uncompressed-ring bytes
// to those, the encode + decode time per rank, and (with -c) the relative error against the exact
// fp32 all-reduce.
#pragma once

#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace gradcomp {

class Communicator;

struct AllreducePerfOptions {
  size_t minBytes = 1 << 20, maxBytes = 64 << 20;
  double stepFactor = 2;
  std::vector<std::string> codecs;      // default: none
  std::vector<std::string> algorithms;  // default: ring
  std::vector<std::string> cases;       // "algorithm/codec" pairs; when given, instead of the product
  std::string errorFeedback = "none";   // for lossy codecs (lossless runs use none)
  std::string interAlgorithm = "ring";
  std::string op = "sum";
  int warmup = 2, iterations = 5;
  bool check = false, csv = false;
  uint64_t seed = 1;
  // In-process transport.
  int ranks = 4;
  int ranksPerNode = 0;
  std::string linkModel;  // e.g. "inter=1gbit/50us"
  double timeoutSeconds = 120;
  // The tensor as a matrix, "ROWSxCOLS" (powersgd needs it): the one message size of the sweep.
  std::string shape;
  std::string lowRank;  // powersgd: rank=,start_iter=,min_compression=,epsilon=
};

// "ROWSxCOLS" -> rows, cols; InvalidArgument naming the text unless both are in [1, 2^31) and the
// product is at most 2^31 elements.
std::pair<uint64_t, uint64_t> parseShape(const std::string& text);

// Runs the sweep on this rank; rank 0 writes the table. Every rank of `comm` must call it.
void runAllreducePerf(const AllreducePerfOptions& options, Communicator& comm, std::ostream& out);
// In-process: makes options.ranks threads (with the link model) and runs the sweep on them.
void runAllreducePerfInProcess(const AllreducePerfOptions& options, std::ostream& out);

}  // namespace gradcomp
