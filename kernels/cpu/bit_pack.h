// LSB-first bit streams: element i occupies bits [i*b, i*b + b) of the byte array. Sections start on
// a byte for every tile (tiles begin at multiples of 8 elements), and bits past the last element are
// zero on encode and ignored on decode. Little-endian layout (as every supported target is).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace gradcomp::cpu {

namespace detail {

// Groups of 8 codes of B bits fill exactly B bytes. B is a template parameter so the shifts are
// constants and the compiler unrolls (and vectorizes) the group loop.
template <int B>
void packGroups(const uint8_t* codes, size_t groups, uint8_t* out) {
  for (size_t g = 0; g < groups; ++g) {
    uint64_t word = 0;
    for (int j = 0; j < 8; ++j) word |= static_cast<uint64_t>(codes[8 * g + j]) << (j * B);
    std::memcpy(out + g * B, &word, B);  // little-endian
  }
}

template <int B>
void unpackGroups(const uint8_t* in, size_t groups, uint8_t* codes) {
  constexpr uint64_t kMask = (uint64_t{1} << B) - 1;
  for (size_t g = 0; g < groups; ++g) {
    uint64_t word = 0;
    std::memcpy(&word, in + g * B, B);
    for (int j = 0; j < 8; ++j) codes[8 * g + j] = static_cast<uint8_t>((word >> (j * B)) & kMask);
  }
}

template <int B>
using Width = std::integral_constant<int, B>;

// Calls fn(Width<bits>{}) for bits in 1..8.
template <typename Fn>
void withWidth(int bits, Fn&& fn) {
  switch (bits) {
    case 1: fn(Width<1>{}); break;
    case 2: fn(Width<2>{}); break;
    case 3: fn(Width<3>{}); break;
    case 4: fn(Width<4>{}); break;
    case 5: fn(Width<5>{}); break;
    case 6: fn(Width<6>{}); break;
    case 7: fn(Width<7>{}); break;
    default: fn(Width<8>{}); break;
  }
}

}  // namespace detail

// Packs n codes of `bits` (1..8) bits each starting at bit 0 of `out` (whole bytes written).
// Groups of 8 codes fill exactly `bits` bytes: built in one 64-bit word, no per-bit loop.
inline void packBits(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  if (bits == 4 || bits == 2) {
    // Whole bytes of 2 or 4 codes: a plain loop the compiler vectorizes (the 64-bit group path does
    // not), the same bytes as the general path.
    // Restrict-qualified locals: codes (a scratch tile) never overlaps out (the payload), and without
    // saying so the compiler, inlined into a codec, kept the byte loop scalar (0.37 ns an element of
    // qsgd's 1.6, measured).
    const uint8_t* __restrict c = codes;
    uint8_t* __restrict o = out;
    const size_t per = static_cast<size_t>(8 / bits), whole = n / per;
    if (bits == 4) {
      for (size_t b = 0; b < whole; ++b) o[b] = static_cast<uint8_t>(c[2 * b] | (c[2 * b + 1] << 4));
    } else {
      for (size_t b = 0; b < whole; ++b)
        o[b] = static_cast<uint8_t>(c[4 * b] | (c[4 * b + 1] << 2) | (c[4 * b + 2] << 4) | (c[4 * b + 3] << 6));
    }
    if (whole * per < n) {
      uint32_t v = 0;
      for (size_t j = 0; whole * per + j < n; ++j) v |= static_cast<uint32_t>(codes[whole * per + j]) << (j * static_cast<size_t>(bits));
      out[whole] = static_cast<uint8_t>(v);
    }
    return;
  }
  const size_t groups = n / 8;
  detail::withWidth(bits, [&](auto b) { detail::packGroups<decltype(b)::value>(codes, groups, out); });
  uint64_t acc = 0;
  int filled = 0;
  size_t o = groups * static_cast<size_t>(bits);
  for (size_t i = groups * 8; i < n; ++i) {
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
  if (bits == 4 || bits == 2) {
    const size_t per = static_cast<size_t>(8 / bits);
    const uint8_t m = static_cast<uint8_t>((1u << bits) - 1u);
    const size_t whole = n / per;
    const uint8_t* __restrict src = in;  // as in packBits: the payload never overlaps the scratch codes
    uint8_t* __restrict dst = codes;
    if (bits == 4) {
      for (size_t b = 0; b < whole; ++b) {
        dst[2 * b] = static_cast<uint8_t>(src[b] & 0xfu);
        dst[2 * b + 1] = static_cast<uint8_t>(src[b] >> 4);
      }
    } else {
      for (size_t b = 0; b < whole; ++b)
        for (size_t j = 0; j < 4; ++j) dst[4 * b + j] = static_cast<uint8_t>((src[b] >> (2 * j)) & 3u);
    }
    for (size_t i = whole * per; i < n; ++i)
      codes[i] = static_cast<uint8_t>((in[i / per] >> ((i % per) * static_cast<size_t>(bits))) & m);
    return;
  }
  const size_t groups = n / 8;
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  detail::withWidth(bits, [&](auto b) { detail::unpackGroups<decltype(b)::value>(in, groups, codes); });
  uint64_t acc = 0;
  int filled = 0;
  size_t p = groups * static_cast<size_t>(bits);
  for (size_t i = groups * 8; i < n; ++i) {
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
