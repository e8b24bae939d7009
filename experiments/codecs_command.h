// `gradcomp codecs`: one row per codec on a normal random vector -- bits per element, wire bytes,
// compression ratio, relative L2 error, and encode / decode throughput, with the CPU kernel path it used.
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
  std::string cpuPath;              // avx512 | avx2 | scalar (kernels/cpu/cpu_path.h); empty: the best here
};

void runCodecsCommand(const CodecsOptions& options, std::ostream& out);

}  // namespace gradcomp
