// Stochastic level quantizers: QSGD (Alistarh et al. 2017) and TernGrad (Wen et al. 2017). Both are
// unbiased: E[decode(encode(x))] = x, with the randomness from Philox uniforms passed in.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradcomp::cpu {

// Sum of squares of a block, accumulated in double over 4 interleaved lanes combined as
// (l0+l1)+(l2+l3): a fixed order, so every backend that follows it gets the same value.
double blockSumSquares(const float* x, size_t n);
// The block's qsgd wire norm with `levels` levels: its L2 norm, capped so that it decodes to finite
// values (kernels/scalar/scale_limits.h).
float blockL2Norm(const float* x, size_t n, int levels);

// QSGD with s = 2^(bits-1) - 1 levels: code = sign << (bits-1) | level, level = floor(|x|/norm*s + u).
// Returns the norm stored for the block.
float encodeQsgdBlock(const float* x, size_t n, int bits, const float* uniforms, uint8_t* codes);
void decodeQsgdBlock(const uint8_t* codes, size_t n, int bits, float norm, float* out, bool accumulate);

// TernGrad: code 0 -> 0, 1 -> +max, 2 -> -max (3 is invalid); P(nonzero) = |x| / max.
float encodeTernBlock(const float* x, size_t n, const float* uniforms, uint8_t* codes);
void decodeTernBlock(const uint8_t* codes, size_t n, float maxAbs, float* out, bool accumulate);

}  // namespace gradcomp::cpu
