// Block-scaled quantization to FP8 (OCP E4M3 / E5M2) and symmetric int8: one fp32 scale per block,
// scale = maxCode / amax, with TransformerEngine's rules: amax 0 or non-finite -> 1, an infinite
// scale (tiny amax) -> FLT_MAX. The wire never carries a scale of 0, Inf or NaN, nor one whose
// reciprocal overflows the decoder (kernels/scalar/scale_limits.h: blockScaleFor).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/rounding_fields.h"
#include "kernels/scalar/float_formats.h"
#include "kernels/scalar/scale_limits.h"

namespace gradcomp::cpu {

float blockScale(float amax, float maxCode);
float blockAmax(const float* x, size_t n);

// One block: writes codes, returns the scale used; counts saturations (|x*scale| beyond the range).
float encodeFp8Block(const float* x, size_t n, scalar::Fp8Format fmt, uint8_t* codes, uint64_t& saturated);
// The same, also writing residual[i] = x[i] - (decodeFp8Block's value of codes[i]): fused error
// feedback without reading the codes back or storing the decoded values.
float encodeFp8BlockResidual(const float* x, size_t n, scalar::Fp8Format fmt, uint8_t* codes, uint64_t& saturated,
                             float* residual);
void decodeFp8Block(const uint8_t* codes, size_t n, scalar::Fp8Format fmt, float scale, float* out, bool accumulate);
// Index of the first NaN/Inf code, or n.
size_t firstNonFiniteFp8(const uint8_t* codes, size_t n, scalar::Fp8Format fmt);
// Index of the first int8 code -128 (outside the symmetric range), or n.
size_t firstInt8Minimum(const int8_t* codes, size_t n);
// Index of the first int4 nibble 0x8 (-8, outside the symmetric range) among n nibbles packed two a byte
// (LSB-first), or n.
size_t firstInt4Minimum(const uint8_t* packed, size_t n);

// Consecutive blocks of x (the last may be short): codes, one scale per block in scales[], and with
// residual != nullptr also residual[i] = x[i] - decoded[i]. The tile-level entry point of the codec.
void encodeFp8Blocks(const float* x, size_t n, size_t blockSize, scalar::Fp8Format fmt, uint8_t* codes, float* scales,
                     uint64_t& saturated, float* residual);
// encodeFp8Blocks without the residual, for input not yet checked: returns the index of the first NaN/Inf
// (found by the block maxima the scales need; the codes are then unspecified), or n.
size_t encodeFp8BlocksChecked(const float* x, size_t n, size_t blockSize, scalar::Fp8Format fmt, uint8_t* codes,
                              float* scales, uint64_t& saturated);

// Symmetric int8 in [-127, 127]. `uniforms` (element i's is uniforms.uniform(i): rounding_fields.h)
// selects stochastic rounding floor(v + u); a view with no words ({}) rounds to nearest even. The vector
// paths widen the fields in registers.
// With nonFinite given, a block holding a NaN/Inf (its largest |bits|, which the scale needs anyway,
// reaches Inf's) sets *nonFinite and writes no codes: the codec's input check rides in this pass.
// With residual given, residual[i] = x[i] - decodeInt8Block's value of codes[i] (error feedback's new
// error, bit for bit: code x fl(1 / scale), then the subtraction), from the code still in a register.
float encodeInt8Block(const float* x, size_t n, const RoundingFields& uniforms, int8_t* codes, bool* nonFinite = nullptr,
                      float* residual = nullptr);
// encodeInt8Block over a tile's blocks (blockSize each, a shorter last one): scales[b] and the codes (and
// residual when given) of every block before the first holding a NaN/Inf, whose start it returns (n when
// none). The same bytes as block by block; stochastic or with a residual (the input in cache), on the
// AVX-512 path up to 16 blocks at a time in three phases (maxima, scales, codes), on the AVX2 path up to
// 8 (the maxima by one transposing reduction), so one block's chain of a maximum and two divisions
// overlaps the others' work instead of holding up its own codes.
size_t encodeInt8Blocks(const float* x, size_t n, size_t blockSize, const RoundingFields& uniforms, float* scales, int8_t* codes,
                        float* residual = nullptr);
// The same grid with a narrower range [-maxCode, maxCode] (int4: 7), scale = maxCode / amax.
float encodeSymmetricIntBlock(const float* x, size_t n, int maxCode, const RoundingFields& uniforms, int8_t* codes,
                              bool* nonFinite = nullptr, float* residual = nullptr);
void decodeInt8Block(const int8_t* codes, size_t n, float scale, float* out, bool accumulate);
// The overwrite decode of a tile's int8 blocks (blockSize each, a shorter last one) with the payload's
// checks in the same pass: every block's scale accepted by `rule` and no code -128. Returns n when all
// pass (out then holds decodeInt8Block's values), else the index of the first element of a block with a
// rejected scale, or of the first -128 (out then partly written: the caller zero-fills it). streamOut:
// non-temporal stores on the vector path, for outputs far larger than the caches (the caller ends with
// fenceStreamedStores()).
size_t decodeInt8BlocksChecked(const int8_t* codes, size_t n, size_t blockSize, const float* scales,
                               const scalar::ScaleRule& rule, float* out, bool streamOut);
// Consecutive blocks of x (the last may be short) in symmetric int4 [-7, 7]: scales[b] per block and the
// codes as two's complement nibbles, LSB-first (element 2j in the low nibble of packed[j]; a last odd
// element's byte has a zero high nibble). `uniforms` as for encodeSymmetricIntBlock. firstBad (when
// given): a block maximum at or past Inf means NaN/Inf in the block; *firstBad is set to the first such
// index and the encode stops (the codes are then unspecified). Without it the input must be finite.
void encodeInt4Blocks(const float* x, size_t n, size_t blockSize, const RoundingFields& uniforms, float* scales,
                      uint8_t* packed, uint64_t* firstBad = nullptr);
// Its decoder: out (=|+=) code x fl(1 / scales[b]) (decodeInt8Block's arithmetic) from the packed nibbles.
void decodeInt4Blocks(const uint8_t* packed, size_t n, size_t blockSize, const float* scales, float* out,
                      bool accumulate);

}  // namespace gradcomp::cpu
