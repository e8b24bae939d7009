// The counter-based RNG key of one codec call, as every binding takes it from Python keywords.
#pragma once

#include <cstdint>

#include "compressors/compressor.h"

namespace gradcomp::python {

inline EncodeContext encodeContext(uint64_t seed, uint32_t rank, uint32_t step, uint32_t tensorId,
                                   uint64_t kOverride = 0) {
  EncodeContext ctx;
  ctx.seed = seed;
  ctx.rank = rank;
  ctx.step = step;
  ctx.tensorId = tensorId;
  ctx.kOverride = kOverride;
  return ctx;
}

}  // namespace gradcomp::python
