// Helpers for the collectives tests: exact-by-construction inputs, running ranks as threads, and a
// communicator decorator that injects faults into what a rank sends.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/inprocess_communicator.h"
#include "core/error.h"

namespace gradcomp::testing {

// Integer-valued floats, distinct per (rank, element) while n * P < 2^21, |value| < 2^21: any sum of up
// to 8 of them, in any order, is exact in fp32 (|partial sum| <= 2^24).
inline float exactValue(int rank, int ranks, size_t i) {
  const int64_t v = static_cast<int64_t>((i * static_cast<size_t>(ranks) + static_cast<size_t>(rank)) % (1u << 21));
  return static_cast<float>((i & 1) ? -v : v);
}

inline std::vector<float> exactInput(int rank, int ranks, size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = exactValue(rank, ranks, i);
  return x;
}

inline std::vector<float> exactSum(int ranks, size_t n) {
  std::vector<float> s(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t acc = 0;
    for (int r = 0; r < ranks; ++r) acc += static_cast<int64_t>(exactValue(r, ranks, i));
    s[i] = static_cast<float>(acc);
  }
  return s;
}

inline std::vector<float> normalInput(int rank, size_t n, uint64_t seed = 7) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(rank));
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  return x;
}

inline double relativeError(const std::vector<float>& x, const std::vector<double>& exact) {
  double e = 0, nrm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (x[i] - exact[i]) * (x[i] - exact[i]);
    nrm += exact[i] * exact[i];
  }
  return nrm > 0 ? std::sqrt(e / nrm) : std::sqrt(e);
}

inline std::string messageOf(const std::exception_ptr& p) {
  if (!p) return "";
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "unknown";
}

inline AllreduceConfig allreduceConfig(const std::string& algorithm, const std::string& codec = "none",
                                       const std::string& ef = "none") {
  AllreduceConfig c;
  c.algorithm = algorithm;
  c.codec = codec;
  c.errorFeedback = ef;
  return c;
}

inline CommunicatorOptions withTimeout(double seconds) {
  CommunicatorOptions o;
  o.timeoutSeconds = seconds;
  return o;
}

// Whether a rank's exception is of type E.
template <typename E>
bool isA(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

// Runs fn on every rank and fails the test with the first rank's error, if any.
inline void runRanksOk(int ranks, const std::function<void(Communicator&)>& fn, CommunicatorOptions options = {},
                       LinkModel links = {}) {
  if (options.timeoutSeconds == 60.0) options.timeoutSeconds = 30.0;
  const auto errors = runInProcess(ranks, fn, options, links);
  for (size_t r = 0; r < errors.size(); ++r) ASSERT_FALSE(errors[r]) << "rank " << r << ": " << messageOf(errors[r]);
}

// Wraps a communicator; `mutate` may change (or drop) what this rank sends.
class FaultyCommunicator final : public Communicator {
 public:
  using Mutator = std::function<void(std::vector<std::byte>& message, int peer, Tag tag)>;
  FaultyCommunicator(Communicator& inner, Mutator mutate)
      : Communicator("faulty", inner.rank(), worldsOf(inner), nodesOf(inner), optionsOf(inner),
                     std::make_shared<TrafficStats>(inner.size())),
        inner_(inner),
        mutate_(std::move(mutate)) {}

  Request isend(std::span<const std::byte> data, int peer, Tag tag) override {
    auto copy = std::make_shared<std::vector<std::byte>>(data.begin(), data.end());
    mutate_(*copy, peer, tag);
    keep_.push_back(copy);
    return inner_.isend(*copy, peer, tag);
  }
  Request irecv(std::span<std::byte> buffer, int peer, Tag tag) override { return inner_.irecv(buffer, peer, tag); }
  size_t wait(Request& r, Deadline d, const char* what) override { return inner_.wait(r, d, what); }

 protected:
  std::unique_ptr<Communicator> makeChild(const std::vector<int>&, int, int, int) override {
    GRADCOMP_THROW(InvalidArgument, "FaultyCommunicator cannot split");
  }

 private:
  static std::vector<int> worldsOf(const Communicator& c) {
    std::vector<int> v;
    for (int r = 0; r < c.size(); ++r) v.push_back(c.worldRank(r));
    return v;
  }
  static std::vector<int> nodesOf(const Communicator& c) {
    std::vector<int> v;
    for (int r = 0; r < c.size(); ++r) v.push_back(c.node(r));
    return v;
  }
  static CommunicatorOptions optionsOf(const Communicator& c) {
    CommunicatorOptions o;
    o.timeoutSeconds = c.timeoutSeconds();
    return o;
  }
  Communicator& inner_;
  Mutator mutate_;
  std::vector<std::shared_ptr<std::vector<std::byte>>> keep_;
};

}  // namespace gradcomp::testing
