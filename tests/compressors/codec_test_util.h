#pragma once

#include <algorithm>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <random>
#include <span>
#include <vector>

#include "compressors/compressor.h"
#include "core/error.h"

namespace gradcomp::testing {

// The codec configurations every codec-wide test runs over: each codec, with its parameters' variants
// (the invariants, the range edges and the golden wire hashes). A new codec adds its rows here.
inline const std::vector<std::string> kCodecConfigurations = {
    "none",          "fp16",           "fp16:prescale=0.125", "bf16",          "fp8-e4m3",
    "fp8-e5m2",      "fp8-e4m3:block=7", "int8",              "int8:rounding=stochastic,block=100",
    "qsgd",          "qsgd:bits=2",    "qsgd:bits=8,block=33", "terngrad",     "topk",
    "topk:ratio=0.1,values=fp16", "randomk:ratio=0.05", "randomk:k=3,values=fp16,unbiased=true",
    "randomk:ratio=0.25,unbiased=true",
    "threshold:ratio=0.05", "sign",   "sign:block=9",        "onebit",        "onebit:block=13",
    "mxfp8",         "mxfp8:elem=e5m2", "mxfp6",              "mxfp6:elem=e3m2", "mxfp4",
    "mxfp4:block=24", "nvfp4",         "int4",                "int4:rounding=stochastic,block=20",
    "int4:rotate=hadamard", "int8:rotate=hadamard,rblock=64", "mxfp4:rotate=hadamard,rblock=1024",
    "nvfp4:rotate=hadamard", "sign:rotate=hadamard,rblock=32", "qsgd:bits=2,rotate=hadamard",
    "fp8-e4m3:rotate=hadamard,rblock=128", "int8:rounding=stochastic,rounding_bits=8", "qsgd:bits=3,rounding_bits=8",
    "terngrad:block=100,rounding_bits=8", "int4:rounding=stochastic,rounding_bits=8,rotate=hadamard",
    // qsgd's and terngrad's vector routes on 8-bit rounding fields (blocks of a multiple of 16, 4-bit qsgd).
    "qsgd:rounding_bits=8", "terngrad:block=64,rounding_bits=8",
};

// Configurations with the keyed Hadamard rotation: their error bounds hold in the rotated domain.
inline bool isRotated(const std::string& spec) { return spec.find("rotate=hadamard") != std::string::npos; }

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

// Rewrites header fields and re-signs the checksum, as a buggy (not random) sender would.
inline void rewrite(std::vector<std::byte>& w, const std::function<void(WireHeader&)>& edit) {
  WireHeader h = headerOf(w);
  edit(h);
  h.checksum = headerChecksum(h);
  std::memcpy(w.data(), &h, sizeof h);
}

// Overwrites the bytes of `value` at `offset` (payload corruption; the header stays valid).
template <typename T>
void poke(std::vector<std::byte>& w, size_t offset, T value) {
  std::memcpy(w.data() + offset, &value, sizeof(T));
}

// Expects a DecodeError mentioning `text`, and `out` untouched (both modes).
inline void expectRejected(const Compressor& c, const std::vector<std::byte>& w, size_t n, const std::string& text) {
  for (DecodeMode mode : {DecodeMode::Overwrite, DecodeMode::Accumulate}) {
    std::vector<float> out(n, 42.0f);
    try {
      c.decode(w, out, mode);
      ADD_FAILURE() << c.name() << ": accepted a buffer that should fail with '" << text << "'";
    } catch (const DecodeError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "message: " << e.what();
    }
    // Accumulate: untouched. Overwrite: untouched, or all zeros for codecs that check while decoding.
    const bool zeroed = mode == DecodeMode::Overwrite && std::all_of(out.begin(), out.end(), [](float v) { return v == 0.0f; });
    if (!zeroed) {
      for (float v : out) ASSERT_EQ(v, 42.0f) << "decode wrote before failing (and left no clean zeros)";
    }
  }
}

}  // namespace gradcomp::testing
