// AVX-512 pieces of the block-scaled fp8 and int encoders (block_scale_kernels_avx512.cc), called by
// block_scale_kernels.cc when cpu_path.h selects the avx512 path. Same bytes as the scalar loops.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/avx512_build.h"
#include "kernels/cpu/rounding_fields.h"
#include "kernels/scalar/float_formats.h"

#if GRADCOMP_CPU_AVX512_KERNELS
namespace gradcomp::cpu::avx512 {

// The largest |bits| of x[0..n) (order-free, so exact).
uint32_t maxAbsBits(const float* x, size_t n);
// The largest |bits| of g[i] + e[i] over [0, n) (each sum rounded to fp32 first, as the encoders form it).
uint32_t maxAbsBitsOfSum(const float* g, const float* e, size_t n);

// Consecutive blocks of x (the last may be short): scales[b] = blockScaleFor(amax of block b), codes[i] =
// fp8(x[i] * scale), every lane (tails masked). Returns the values at or past overflowBits (the rounding
// midpoint above the largest code): the saturations.
// With firstBad given, a block whose maximum reaches Inf's stops the encoding with *firstBad = the index
// of its first NaN/Inf.
// With residual given, residual[i] = x[i] - decodeFp8Block's value of codes[i] (error feedback's new error).
uint64_t encodeFp8Blocks(const float* x, size_t n, size_t blockSize, const scalar::Fp8Spec& spec,
                         uint32_t overflowBits, uint8_t* codes, float* scales, size_t* firstBad = nullptr,
                         float* residual = nullptr);

// codes[i] = clamp(round(x[i] * scale), +-maxCode) (nearest even), or floor(x[i] * scale + u_i) where
// uniforms has words (u_i = uniforms.uniform(i), widened in registers), for the first (n / 16) * 16
// elements; returns how many it wrote. With residual given, also residual[i] = x[i] - codes[i] x
// fl(1 / scale) (decodeInt8Block's value).
size_t symmetricIntCodes(const float* x, size_t n, float scale, float maxCode, const RoundingFields& uniforms,
                         int8_t* codes, float* residual = nullptr);

// encodeInt4Blocks (block_scale_kernels.h) for a blockSize that is a multiple of 16: each block's amax,
// scale and nibbles in registers (the standard 64-value blocks 16 at a time, two blocks' nibbles packed
// together; other sizes block by block, their nibbles paired within 64-bit lanes and narrowed by vpmovqb).
void encodeInt4Blocks(const float* x, size_t n, size_t blockSize, const RoundingFields& uniforms, float* scales,
                      uint8_t* packed);
// decodeInt4Blocks (block_scale_kernels.h) for a blockSize that is a multiple of 16.
void decodeInt4Blocks(const uint8_t* packed, size_t n, size_t blockSize, const float* scales, float* out,
                      bool accumulate);

}  // namespace gradcomp::cpu::avx512
#endif
