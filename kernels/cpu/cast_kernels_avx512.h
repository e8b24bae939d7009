// AVX-512 versions of the cast kernels (cast_kernels_avx512.cc), called by cast_kernels.cc when
// cpu_path.h selects the avx512 path. Same contracts as cast_kernels.h; maxAbsBits (when given) receives
// the largest |bits| of the input, so the caller detects Inf/NaN from the same pass.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/avx512_build.h"

#if GRADCOMP_CPU_AVX512_KERNELS
namespace gradcomp::cpu::avx512 {

uint64_t encodeFp16(const float* in, size_t n, float prescale, uint16_t* out, bool streamOut, uint32_t* maxAbsBits);
void decodeFp16(const uint16_t* in, size_t n, float inversePrescale, float* out, bool accumulate, bool streamOut);
uint64_t encodeBf16(const float* in, size_t n, uint16_t* out, bool streamOut, uint32_t* maxAbsBits);
void decodeBf16(const uint16_t* in, size_t n, float* out, bool accumulate, bool streamOut);
size_t firstAllOnesExponent(const uint16_t* in, size_t n, uint16_t expMask);
// The fused error-feedback encoders of cast_kernels.h (finite input).
uint64_t encodeFp16WithResidual(const float* in, size_t n, float prescale, float inversePrescale, uint16_t* out,
                                float* residual);
uint64_t encodeBf16WithResidual(const float* in, size_t n, uint16_t* out, float* residual);

}  // namespace gradcomp::cpu::avx512
#endif
