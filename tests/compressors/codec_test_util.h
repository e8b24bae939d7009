#pragma once

#include <cstddef>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "compressors/compressor.h"

namespace gradcomp::testing {

// A 16-byte aligned byte buffer (the encode contract) pre-filled with a pattern, so tests notice
// output that depends on what the buffer held before.
struct WireBuffer {
  explicit WireBuffer(size_t bytes, std::byte fill = std::byte{0xab}) : storage(bytes + 16, fill) {}
  std::span<std::byte> span(size_t bytes) {
    auto* p = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(storage.data()) + 15) & ~uintptr_t(15));
    return {p, bytes};
  }
  std::vector<std::byte> storage;
};

inline WireHeader headerOf(std::span<const std::byte> wire) {
  WireHeader h;
  std::memcpy(&h, wire.data(), sizeof h);
  return h;
}

inline std::vector<float> normalVector(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

// Encodes into a fresh buffer; returns the used bytes.
inline std::vector<std::byte> encodeToVector(const Compressor& c, std::span<const float> x, const EncodeContext& ctx = {},
                                             std::byte fill = std::byte{0xab}) {
  const size_t cap = c.maxEncodedBytes(x.size(), ctx);
  WireBuffer buf(cap, fill);
  const EncodeResult r = c.encode(x, buf.span(cap), ctx);
  auto s = buf.span(r.wireBytes);
  return {s.begin(), s.end()};
}

inline std::vector<float> decodeToVector(const Compressor& c, std::span<const std::byte> wire, size_t n) {
  std::vector<float> out(n, -7.0f);
  c.decode(wire, out, DecodeMode::Overwrite);
  return out;
}

}  // namespace gradcomp::testing
