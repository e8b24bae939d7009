#include "kernels/cpu/march_intrinsics.h"  // first: its pragmas must precede <immintrin.h>

#include "kernels/cpu/rounding_fields.h"

#include <algorithm>

#if defined(__AVX2__)
#include "kernels/cpu/philox_batches.h"
#endif

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
  [[maybe_unused]] const auto linesOf = [&](size_t c, size_t count) {
    const size_t begin = c * perCall > skipped ? c * perCall - skipped : 0;
    const size_t end = std::min<size_t>(n, (c + count) * perCall - skipped);
    const int lines = readAhead && end > begin ? static_cast<int>((end - begin + 15) / 16) : 0;
    return LinesAcrossRounds{aheadOrigin + 4 * begin, lines, into};
  };
  size_t c = 0;
  // Four batches side by side while a step fits (philoxRoundsFrom: they keep the multiplier busy), then
  // fewer: a short tile (terngrad's 1000-value blocks, a tensor's last tile) keeps its calls in lanes.
#if defined(__AVX512F__)
  for (; c + 64 <= calls; c += 64) philox16InOrder<4>(stream, firstCall + c, out + 4 * c, linesOf(c, 64));
  for (; c + 32 <= calls; c += 32) philox16InOrder<2>(stream, firstCall + c, out + 4 * c, linesOf(c, 32));
  for (; c + 16 <= calls; c += 16) philox16InOrder<1>(stream, firstCall + c, out + 4 * c, linesOf(c, 16));
#elif defined(__AVX2__)
  for (; c + 32 <= calls; c += 32) philox8InOrder<4>(stream, firstCall + c, out + 4 * c, linesOf(c, 32));
  for (; c + 8 <= calls; c += 8) philox8InOrder<1>(stream, firstCall + c, out + 4 * c, linesOf(c, 8));
#endif
  if (readAhead && c < calls) {
    const size_t begin = c * perCall > skipped ? c * perCall - skipped : 0;
    prefetchFloats(readAhead, begin, n, into);
  }
  for (; c < calls; ++c) {
    const scalar::Philox4 w = stream.block(firstCall + c);
    for (size_t k = 0; k < 4; ++k) out[4 * c + k] = w.v[k];
  }
  return {out, skipped, bits};
}

}  // namespace gradcomp::cpu
