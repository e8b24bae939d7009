// The CPU threads of one encode or decode (ExecContext::cpuThreads): a range of tiles split into one
// contiguous part per thread, the calling thread taking the first. Shared by the block codecs and the
// sparse codecs' decoders.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/checked_math.h"

namespace gradcomp {

// Below this many elements a second thread costs more to start than it saves.
constexpr uint64_t kMinElementsPerThread = 1u << 18;

// Runs fn(firstTile, endTile, thread) over contiguous tile ranges, one per thread, for a work of
// numElements elements (which bounds how many threads are worth starting).
template <typename Fn>
void forTileRanges(uint64_t numTiles, uint64_t numElements, int threads, Fn&& fn) {
  const uint64_t useful = std::max<uint64_t>(1, numElements / kMinElementsPerThread);
  const uint64_t t = std::min<uint64_t>({static_cast<uint64_t>(std::max(threads, 1)), useful, std::max<uint64_t>(numTiles, 1)});
  if (t <= 1) {
    fn(uint64_t{0}, numTiles, uint64_t{0});
    return;
  }
  std::vector<std::thread> pool;
  const uint64_t per = ceilDiv(numTiles, t);
  for (uint64_t i = 1; i < t; ++i)
    pool.emplace_back([&, i] { fn(std::min(numTiles, i * per), std::min(numTiles, (i + 1) * per), i); });
  fn(uint64_t{0}, std::min(numTiles, per), uint64_t{0});
  for (auto& th : pool) th.join();
}

}  // namespace gradcomp
