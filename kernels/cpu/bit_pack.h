// LSB-first bit streams: element i occupies bits [i*b, i*b + b) of the byte array. Sections start on
// a byte for every tile (tiles begin at multiples of 8 elements), and bits past the last element are
// zero on encode and ignored on decode.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradcomp::cpu {

// Packs n codes of `bits` (1..8) bits each starting at bit 0 of `out` (whole bytes written).
inline void packBits(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  uint64_t acc = 0;
  int filled = 0;
  size_t o = 0;
  for (size_t i = 0; i < n; ++i) {
    acc |= static_cast<uint64_t>(codes[i]) << filled;
    filled += bits;
    while (filled >= 8) {
      out[o++] = static_cast<uint8_t>(acc);
      acc >>= 8;
      filled -= 8;
    }
  }
  if (filled > 0) out[o] = static_cast<uint8_t>(acc);
}

inline void unpackBits(const uint8_t* in, size_t n, int bits, uint8_t* codes) {
  uint64_t acc = 0;
  int filled = 0;
  size_t p = 0;
  const uint32_t mask = (1u << bits) - 1u;
  for (size_t i = 0; i < n; ++i) {
    while (filled < bits) {
      acc |= static_cast<uint64_t>(in[p++]) << filled;
      filled += 8;
    }
    codes[i] = static_cast<uint8_t>(acc & mask);
    acc >>= bits;
    filled -= bits;
  }
}

inline size_t packedBytes(size_t n, int bits) { return (n * static_cast<size_t>(bits) + 7) / 8; }

}  // namespace gradcomp::cpu
