// fp32 <-> fp16 / bf16 array conversions (saturating RNE, see kernels/scalar/float_formats.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradcomp::cpu {

// The vector path (AVX-512, AVX2 + F16C or scalar) is chosen at run time: kernels/cpu/cpu_path.h.

// out[i] = fp16(in[i] * prescale); returns how many finite values saturated to +-65504.
// streamOut: write with non-temporal stores (out 16-byte aligned), for outputs far larger than the
// caches, where a normal store first reads the line it overwrites. Same bytes either way; the caller
// ends with fenceStreamedStores(). maxAbsBits, when given, receives the largest |bits| of the input (>=
// 0x7f800000: an Inf or NaN was there), found in the same pass.
uint64_t encodeFp16(const float* in, size_t n, float prescale, uint16_t* out, bool streamOut = false,
                    uint32_t* maxAbsBits = nullptr);
// Orders this thread's non-temporal stores before its later stores: call once after the last
// streamed call, before the data is handed to another thread or the caller (an sfence).
void fenceStreamedStores();

// out[i] (=|+=) fp16 value * inversePrescale. streamOut (overwrite only): non-temporal stores on the
// vector paths (AVX-512, AVX2), for outputs far larger than the caches; the caller ends with
// fenceStreamedStores().
void decodeFp16(const uint16_t* in, size_t n, float inversePrescale, float* out, bool accumulate,
                bool streamOut = false);

uint64_t encodeBf16(const float* in, size_t n, uint16_t* out, bool streamOut = false, uint32_t* maxAbsBits = nullptr);
void decodeBf16(const uint16_t* in, size_t n, float* out, bool accumulate, bool streamOut = false);

// Error feedback's step: encodeFp16 / encodeBf16 of finite input that also writes residual[i] = in[i] -
// (decodeFp16's / decodeBf16's value of code i), bit for bit. On AVX-512 from the codes in registers;
// elsewhere an encode, a decode into residual and the difference.
uint64_t encodeFp16WithResidual(const float* in, size_t n, float prescale, float inversePrescale, uint16_t* out,
                                float* residual);
uint64_t encodeBf16WithResidual(const float* in, size_t n, uint16_t* out, float* residual);

// Overwrite decodes that also check the codes, for a payload not validated yet: return the index of the
// first Inf/NaN code, or n when there is none. out is fully written only when n is returned; otherwise
// it holds whatever was decoded (the codec zeroes it). streamOut as in decodeFp16.
size_t decodeFp16Checked(const uint16_t* in, size_t n, float inversePrescale, float* out, bool streamOut = false);
size_t decodeBf16Checked(const uint16_t* in, size_t n, float* out, bool streamOut = false);

// Index of the first Inf/NaN code, or n.
size_t firstNonFiniteFp16(const uint16_t* in, size_t n);
size_t firstNonFiniteBf16(const uint16_t* in, size_t n);

}  // namespace gradcomp::cpu
