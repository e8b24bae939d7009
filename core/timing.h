// Wall-clock helpers: seconds since a steady-clock point (the collectives' codec-time counters), and for
// the experiments the median of repeated runs (one slow run does not move it).
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace gradcomp {

inline double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <typename Fn>
double medianSeconds(int repeats, Fn&& fn) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

}  // namespace gradcomp
