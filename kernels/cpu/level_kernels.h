// Stochastic level quantizers: QSGD (Alistarh et al. 2017) and TernGrad (Wen et al. 2017). Both are
// unbiased: E[decode(encode(x))] = x, with the randomness from Philox uniforms passed in.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradcomp::cpu {

struct RoundingFields;

// Sum of squares of a block, accumulated in double over 4 interleaved lanes combined as
// (l0+l1)+(l2+l3): a fixed order, so every backend that follows it gets the same value.
double blockSumSquares(const float* x, size_t n);
// sums[b] = blockSumSquares of each consecutive block (the last may be short), bit for bit: a tile's
// blocks summed in one pass before any is encoded (and a non-finite sum found first). Eight blocks (then
// four) run side by side on the AVX2 and AVX-512 paths, so x should be in cache (as qsgd's prefetched tile is): from
// memory, as many streams a block apart are slower than one.
void blockSumSquaresEach(const float* x, size_t n, size_t blockSize, double* sums);
// The block's qsgd wire norm with `levels` levels: its L2 norm, capped so that it decodes to finite
// values (kernels/scalar/scale_limits.h).
float blockL2Norm(const float* x, size_t n, int levels);

// QSGD with s = 2^(bits-1) - 1 levels: code = sign << (bits-1) | level, level = floor(|x|/norm*s + u).
// Returns the norm stored for the block.
float encodeQsgdBlock(const float* x, size_t n, int bits, const float* uniforms, uint8_t* codes);
// The same with the block's blockSumSquares already known (so a tile's blocks can be summed together,
// and a non-finite sum, a NaN/Inf in the block, found before encoding).
float encodeQsgdBlockOfSum(const float* x, size_t n, int bits, double sumSquares, const float* uniforms,
                           uint8_t* codes);
// The same from the block's wire norm (the codes only).
float encodeQsgdBlockOfNorm(const float* x, size_t n, int bits, float norm, const float* uniforms, uint8_t* codes);
void decodeQsgdBlock(const uint8_t* codes, size_t n, int bits, float norm, float* out, bool accumulate);

// TernGrad: code 0 -> 0, 1 -> +max, 2 -> -max (3 is invalid); P(nonzero) = |x| / max.
// nonFinite as for encodeQsgdBlock, checked by the block maximum.
float encodeTernBlock(const float* x, size_t n, const float* uniforms, uint8_t* codes, bool* nonFinite = nullptr);
void decodeTernBlock(const uint8_t* codes, size_t n, float maxAbs, float* out, bool accumulate);

// A codec tile at once, the codes packed LSB-first from bit 0 of `packed` (the tile starts on a byte),
// with the bytes of encodeQsgdBlockOfSum / encodeTernBlock followed by packBits. On the avx512 and avx2
// paths with blocks a multiple of 16 the codes go from registers into `packed` (level_kernels_avx512.h,
// and the AVX2 twins in level_kernels.cc; qsgd at 4 or 8 bits).
// QSGD: norms[b] is block b's wire norm (scalar::qsgdWireNorm of its sum of squares), and x is finite (the
// codec checks the sums first): the AVX2 4-bit route converts |x| x s / norm, at most s plus a few ulps,
// to an integer before it clamps. For both codecs element i's uniform is uniforms.uniform(i), widened from
// its Philox field in registers (rounding_fields.h).
void encodeQsgdTilePacked(const float* x, size_t n, size_t blockSize, int bits, const float* norms,
                          const RoundingFields& uniforms, uint8_t* packed);
// TernGrad: writes maxima[b] of the blocks before the first NaN/Inf; returns its index (then the codes
// and the later maxima are unspecified), or n.
size_t encodeTernTilePacked(const float* x, size_t n, size_t blockSize, const RoundingFields& uniforms, float* maxima,
                            uint8_t* packed);
// TernGrad's decode of a tile packed as encodeTernTilePacked writes it: out (=|+=) decodeTernBlock's values.
// On the avx512 path with blocks a multiple of 16 the codes are read from `packed` in registers.
void decodeTernTilePacked(const uint8_t* packed, size_t n, size_t blockSize, const float* maxima, float* out,
                          bool accumulate);

}  // namespace gradcomp::cpu
