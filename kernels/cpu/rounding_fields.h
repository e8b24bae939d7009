// Stochastic rounding's uniforms as the Philox stream cuts them, before any conversion to float: the
// words of a run of Philox calls, read as 8- or 16-bit fields, element i's uniform being
// (field + 1/2) 2^-bits (scalar::roundingUniform's value, exact). A code kernel widens the fields it
// needs in registers (a zero-extending load, a conversion and an FMA per vector). Every stochastic codec
// on the CPU (qsgd, terngrad, int8, int4) takes them so. A pass that stored 4 bytes of float per element,
// for the kernel to load again, was 18 % of qsgd's AVX2 encode and 14-18 % of int8's and int4's samples
// (docs/notes.md, twenty-seventh part; int8 and int4 since the twenty-eighth).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu/prefetch.h"
#include "kernels/scalar/philox.h"

namespace gradcomp::cpu {

// A view with no words (the default) draws nothing: the int8 and int4 kernels (block_scale_kernels.h) read
// it as rounding to nearest, as they read a null float pointer before.
struct RoundingFields {
  const uint32_t* words = nullptr;  // the Philox words in stream order
  size_t first = 0;                 // the field of element 0, counted from words[0]'s lowest bits
  // 8 or 16: fillRoundingFields normalises the stream's width so; a view made by hand must use one of
  // them (withFieldWidth reads any other as 16, field() as itself).
  uint32_t bits = scalar::kDefaultRoundingBits;

  // The field's first bit, counted from words[0]'s lowest: shifts, where 32 / bits (a divisor known only at
  // run time) compiled to a 64-bit division per element.
  uint32_t field(size_t i) const {
    const size_t bit = (first + i) * bits;
    return (words[bit / 32] >> (bit % 32)) & ((1u << bits) - 1u);
  }
  float uniform(size_t i) const {
    return (static_cast<float>(field(i)) + 0.5f) * (1.0f / static_cast<float>(1u << bits));
  }
  // Element i's field as bytes, for vector loads: the words are little-endian on every x86 path, so
  // field f of the stream sits at byte f x bits / 8 (16-bit fields: the low half of a word first).
  const uint8_t* bytesAt(size_t i) const { return reinterpret_cast<const uint8_t*>(words) + (first + i) * (bits / 8); }
  RoundingFields from(size_t i) const { return {words, first + i, bits}; }
  bool drawn() const { return words != nullptr; }
};

// f(std::integral_constant<int, B>{}) with B the view's field width, 8 or 16, or 0 for a view with no
// words (nearest rounding): the kernels that widen fields in registers need the width at compile time.
template <class F>
decltype(auto) withFieldWidth(const RoundingFields& u, F&& f) {
  if (!u.drawn()) return f(std::integral_constant<int, 0>{});
  if (u.bits == 8) return f(std::integral_constant<int, 8>{});
  return f(std::integral_constant<int, 16>{});
}

// The fields of elements first .. first + n - 1 of `stream` (any first; rounding bits as
// scalar::roundingUniform reads them: 8, else 16): the words of the Philox calls that hold them go to
// `words` (grown as needed: a caller's per-thread buffer) and the returned view reads them, so that
// fields.uniform(i) == scalar::roundingUniform(stream, first + i) for i < n. On the vector paths the calls
// are made in batches of 8 (AVX2) or 16 (AVX-512) lanes, the widest path compiled in, four batches at a
// time while a step fits, then fewer (philoxWordsInOrder); the last few calls one by one.
// readAhead (may be null): n floats the caller reads next (the codecs pass the tile after the one being
// encoded, which may lie past their input's end: prefetches never fault), prefetched `into` L1 or L2 a
// few lines after each Philox round, so that their loads spread over the arithmetic (one burst of
// prefetches per 256 values after the rounds stalled on the line fill buffers: docs/notes.md,
// twenty-seventh part).
RoundingFields fillRoundingFields(const scalar::RngStream& stream, uint64_t first, size_t n,
                                  std::vector<uint32_t>& words, const float* readAhead = nullptr,
                                  PrefetchInto into = PrefetchInto::L1);

}  // namespace gradcomp::cpu
