// The CUDA encode shared by the level-code family (qsgd, terngrad, onebit, and sign when its blocks
// are not whole warps): per-block statistics, one code byte per element, then bit packing — the same
// three steps as the CPU tiles. Included by those codecs' files under GRADCOMP_HAVE_CUDA only.
#pragma once

#include "compressors/block_codec.h"
#include "compressors/cuda_launch.h"
#include "compressors/stochastic_rounding.h"
#include "kernels/cuda/level_kernels.cuh"

namespace gradcomp::cudapath {

inline void encodeLevelCodes(cuda::LevelCodec codec, int bits, const BlockCodec::DeviceEncode& d) {
  const cudaStream_t stream = asStream(d.stream);
  auto* stats = reinterpret_cast<float*>(d.section(0));
  DeviceScratch<uint8_t> codes(d.n, stream);
  check(cuda::launchLevelBlockStats(codec, bits, d.grad, d.residualIn, d.n, d.h.blockSize, stats, stream),
        "block statistics");
  // The rounding uniforms as the header's flags say (qsgd, terngrad: bit 8; sign and onebit draw none).
  const scalar::RngStream rng = d.rng.withRoundingBits(roundingBitsOfFlags(d.h.flags));
  check(cuda::launchLevelCodes(codec, bits, rng, d.grad, d.residualIn, d.n, d.h.blockSize, stats, codes.get(),
                               d.residualOut, d.firstBad, stream),
        "level codes");
  check(cuda::launchPackCodes(codes.get(), d.n, bits, reinterpret_cast<uint32_t*>(d.section(1)), stream), "bit packing");
}

inline void decodeLevelCodes(cuda::LevelCodec codec, int bits, const BlockCodec::DeviceDecode& d) {
  check(cuda::launchDecodeLevels(codec, bits, reinterpret_cast<const uint8_t*>(d.section(1)), d.h.numElements,
                                 d.h.blockSize, reinterpret_cast<const float*>(d.section(0)), d.out, d.accumulate,
                                 asStream(d.stream)),
        "decode");
}

}  // namespace gradcomp::cudapath
