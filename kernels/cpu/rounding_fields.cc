#include "kernels/cpu/march_intrinsics.h"  // first: its pragmas must precede <immintrin.h>

#include "kernels/cpu/rounding_fields.h"

#include <algorithm>

#include "kernels/cpu/philox_batches.h"

namespace gradcomp::cpu {

namespace {

// The lines of readAhead[begin, end) (floats), a share of them after each Philox round: lines
// [r L / R, (r + 1) L / R) after round r of R. Addresses are formed as integers (prefetch.h: the range may
// lie past the caller's array).
struct LinesAcrossRounds {
  uintptr_t firstLine;
  int lines;
  PrefetchInto into;
  void operator()(int round, int rounds) const {
    for (int l = round * lines / rounds; l < (round + 1) * lines / rounds; ++l) {
      const auto* line = reinterpret_cast<const void*>(firstLine + 64 * static_cast<uintptr_t>(l));
      if (into == PrefetchInto::L1)
        __builtin_prefetch(line, 0, 3);
      else
        __builtin_prefetch(line, 0, 2);
    }
  }
};

}  // namespace

RoundingFields fillRoundingFields(const scalar::RngStream& stream, uint64_t first, size_t n,
                                  std::vector<uint32_t>& words, const float* readAhead, PrefetchInto into) {
  const uint32_t bits = stream.roundingBits == 8 ? 8u : 16u;  // roundingUniform's reading
  const uint64_t perCall = 4 * (32 / bits);                   // elements per Philox call
  const uint64_t firstCall = first / perCall;
  const size_t skipped = static_cast<size_t>(first % perCall);  // fields of the first call before element 0
  const size_t calls = static_cast<size_t>((skipped + n + perCall - 1) / perCall);
  if (words.size() < 4 * calls) words.resize(4 * calls);
  uint32_t* out = words.data();
  // The floats of readAhead that go with calls [c, c + count): elements c perCall - skipped onwards.
  const uintptr_t aheadOrigin = reinterpret_cast<uintptr_t>(readAhead);
  const auto linesOf = [&](size_t c, size_t count) {
    const size_t begin = c * perCall > skipped ? c * perCall - skipped : 0;
    const size_t end = std::min<size_t>(n, (c + count) * perCall - skipped);
    const int lines = readAhead && end > begin ? static_cast<int>((end - begin + 15) / 16) : 0;
    return LinesAcrossRounds{aheadOrigin + 4 * begin, lines, into};
  };
  // The rotation's signs take the same calls (philoxWordsInOrder); here each step also asks for its share
  // of the read-ahead.
  philoxWordsInOrder(stream, firstCall, calls, out, linesOf);
  return {out, skipped, bits};
}

}  // namespace gradcomp::cpu
