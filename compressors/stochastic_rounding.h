// rounding_bits=8|16, the option every stochastic-rounding codec shares (int8 / int4 rounding=stochastic,
// qsgd, terngrad): how many random bits each element's rounding uniform takes (scalar::roundingUniform).
//   16 (the default): one Philox call per 8 elements; the rounding is unbiased to within 2^-17 of a
//       quantization step.
//   8: one call per 16 elements, half the Philox work (the floor of these encoders' time on one core);
//       unbiased to within 2^-9 of a step. A fraction of a step below 2^-9 never rounds up, so values
//       smaller than 1/512 of a step are always rounded towards zero (error feedback carries them over).
// On the wire, flag bit 8 marks 8-bit uniforms in each of these codecs. Decoding does not need it; it
// records how the payload was drawn, so a payload says which setting made it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compressors/codec_spec.h"
#include "compressors/compressor.h"
#include "core/error.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/rounding_fields.h"
#include "kernels/scalar/philox.h"

namespace gradcomp {

constexpr uint32_t kEightBitUniformsFlag = 1u << 8;

// int8 and int4, which round to nearest unless asked: flag bit 0 is rounding=stochastic.
constexpr uint32_t kStochasticRoundingFlag = 1;

// The spec's rounding_bits (8 or 16), left out of the canonical spec at 16 so names stored before the
// option existed still agree. A codec that rounds to nearest takes no rounding_bits.
inline uint32_t roundingBitsParam(const CodecSpec& spec, bool stochastic) {
  if (!stochastic) {
    GRADCOMP_CHECK_ARG(!spec.has("rounding_bits"), spec.name(), ": rounding_bits= needs rounding=stochastic");
    return scalar::kDefaultRoundingBits;
  }
  return spec.getChoiceOmittedAtDefault("rounding_bits", "16", {"8", "16"}) == "8" ? 8u : 16u;
}

inline uint32_t roundingBitsFlag(uint32_t roundingBits) { return roundingBits == 8 ? kEightBitUniformsFlag : 0; }

inline uint32_t roundingBitsOfFlags(uint32_t flags) {
  return (flags & kEightBitUniformsFlag) ? 8u : scalar::kDefaultRoundingBits;
}

// The flags of a codec that rounds to nearest or stochastically (int8, int4).
inline uint32_t roundingFlags(bool stochastic, uint32_t roundingBits) {
  return stochastic ? kStochasticRoundingFlag | roundingBitsFlag(roundingBits) : 0;
}

// Throws DecodeError naming the flags if any bit outside `known` is set.
inline void validateKnownFlags(uint32_t flags, uint32_t known, const std::string& codec) {
  GRADCOMP_CHECK((flags & ~known) == 0, DecodeError, codec, ": unknown format flags 0x", std::hex, flags);
}

// Throws DecodeError unless flags are roundingFlags' (no unknown bit; 8-bit uniforms only with
// stochastic rounding).
inline void validateRoundingFlags(uint32_t flags, const std::string& codec) {
  validateKnownFlags(flags, kStochasticRoundingFlag | kEightBitUniformsFlag, codec);
  GRADCOMP_CHECK(!(flags & kEightBitUniformsFlag) || (flags & kStochasticRoundingFlag), DecodeError, codec,
                 ": flag 0x100 (8-bit rounding uniforms) without flag 0x1 (stochastic rounding)");
}

// Compressor::varianceBound of symmetric block rounding to [-maxCode, maxCode] (int8, int4): stochastic
// rounding to a step of amax / maxCode per block of d values adds at most step^2 / 4 per value, and
// amax^2 <= ||x||^2, so omega = d / (4 maxCode^2); nearest rounding is deterministic: 0.
inline double symmetricRoundingVarianceBound(uint64_t n, uint32_t blockSize, int maxCode, bool stochastic) {
  const double d = static_cast<double>(n < blockSize ? n : blockSize), m = maxCode;
  return stochastic ? d / (4.0 * m * m) : 0.0;
}

// The Philox stream of one encode call, its rounding uniforms as the header's flags say.
inline scalar::RngStream roundingStream(const EncodeContext& ctx, uint32_t flags) {
  return scalar::RngStream::make(ctx.seed, ctx.rank, ctx.step, ctx.tensorId).withRoundingBits(roundingBitsOfFlags(flags));
}

// The rounding fields of one tile of an encode call, elements [begin, begin + count) of its stream
// (cpu::fillRoundingFields), with readAhead's lines prefetched `into` as they are drawn. The words live in
// one per-thread buffer shared by every codec: the view is valid until this thread's next tile, and no
// encode holds one across tiles.
inline cpu::RoundingFields tileRoundingFields(const EncodeContext& ctx, uint32_t flags, uint64_t begin, uint64_t count,
                                              const float* readAhead, cpu::PrefetchInto into) {
  thread_local std::vector<uint32_t> words;
  return cpu::fillRoundingFields(roundingStream(ctx, flags), begin, count, words, readAhead, into);
}

}  // namespace gradcomp
