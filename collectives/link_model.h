// The alpha-beta link model: a message of b bytes on a link class costs latency + b / bandwidth.
// Used to pace the in-process transport (so a slow network can be studied without one) and by every
// algorithm's predictSeconds(), with the same formulas as collectives/README.md.
#pragma once

#include <cstdint>
#include <string>

#include "collectives/communicator.h"

namespace gradcomp {

struct LinkSpec {
  double latencySeconds = 0;   // alpha
  double bytesPerSecond = 0;   // 1 / beta; 0 = unlimited
  double seconds(uint64_t bytes) const {
    return latencySeconds + (bytesPerSecond > 0 ? static_cast<double>(bytes) / bytesPerSecond : 0.0);
  }
  bool active() const { return latencySeconds > 0 || bytesPerSecond > 0; }
};

struct LinkModel {
  LinkSpec intra, inter;
  const LinkSpec& operator[](LinkClass c) const { return c == LinkClass::Intra ? intra : inter; }
  bool active() const { return intra.active() || inter.active(); }

  // "inter=1gbit/50us,intra=100gbit/2us": rate with unit bit|kbit|mbit|gbit (per second) or
  // B|KB|MB|GB (bytes per second), optional /latency in s|ms|us|ns. Either class may be omitted (free).
  static LinkModel parse(const std::string& text);
  std::string describe() const;
};

}  // namespace gradcomp
