// `gradcomp codecs`: one row per codec on a normal random vector -- bits per element, wire bytes,
// compression ratio, relative L2 error, and encode / decode throughput.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace gradcomp {

struct CodecsOptions {
  size_t numElements = 1u << 22;
  bool csv = false;
  uint64_t seed = 1;
  int repeats = 5;  // timings are the median of this many runs
  std::vector<std::string> codecs;  // empty: every registered codec with its defaults
};

void runCodecsCommand(const CodecsOptions& options, std::ostream& out);

}  // namespace gradcomp
