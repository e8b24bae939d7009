// Launchers of the CUDA twins of the codecs whose codes are bit-packed at any width: `qsgd` (2..8
// bits), `terngrad` (2 bits), `onebit`, and `sign` at block sizes that are not a multiple of 32 (the
// ballot kernel of block_scale_kernels.cuh takes the others). Same bytes as kernels/cpu/level_kernels.h
// and kernels/cpu/sign_kernels.h: the per-block statistics are summed in double over the same
// interleaved lanes in the same order, every fp32 step is rounded as on the CPU.
//
// Encoding is three launches: block statistics (one warp per codec block) into the payload's scale
// section; one code byte per element into a scratch array, with the residual; the packing of those
// bytes into the LSB-first bit stream, one 32-bit word per thread (so neighbouring blocks never share
// a word's writer, whatever the block size and width).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/scalar/philox.h"

namespace gradcomp::cuda {

enum class LevelCodec { Qsgd, TernGrad, Sign, OneBit };

// The per-block statistic each codec stores: qsgd the L2 norm (4 double lanes), terngrad max |c|,
// sign mean |c| (8 double lanes), onebit the means of c >= 0 and c < 0 (two floats per block).
// c = g + e (e may be null). bits: qsgd's code width (its norm is capped to what its s levels decode).
cudaError_t launchLevelBlockStats(LevelCodec codec, int bits, const float* g, const float* e, size_t n, size_t blockSize,
                                  float* stats, cudaStream_t stream);

// One code byte per element from c and its block's statistic; uniforms (qsgd, terngrad) are
// roundingUniform(rng, i) for global element i, as cpu::fillRoundingFields reads them. residual (may be
// null, may alias e): c - decoded. firstBad (may be null): smallest index with c NaN/Inf.
cudaError_t launchLevelCodes(LevelCodec codec, int bits, scalar::RngStream rng, const float* g, const float* e,
                             size_t n, size_t blockSize, const float* stats, uint8_t* codes, float* residual,
                             unsigned long long* firstBad, cudaStream_t stream);

// Packs n codes of `bits` (1..8) LSB-first into `packed` (4-byte aligned; whole words written: bits
// past the last element are zero, and the section must have room up to the next multiple of 4 bytes,
// as every 16-byte padded wire section has).
cudaError_t launchPackCodes(const uint8_t* codes, size_t n, int bits, uint32_t* packed, cudaStream_t stream);

// out[i] (=|+=) the decoded value of element i.
cudaError_t launchDecodeLevels(LevelCodec codec, int bits, const uint8_t* packed, size_t n, size_t blockSize,
                               const float* stats, float* out, bool accumulate, cudaStream_t stream);

}  // namespace gradcomp::cuda
