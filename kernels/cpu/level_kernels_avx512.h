// AVX-512 pieces of the stochastic level encoders (level_kernels_avx512.cc), called by level_kernels.cc
// when cpu_path.h selects the avx512 path: the codes of 16 elements at a time, computed and packed
// LSB-first in registers and stored straight into the payload (no byte-per-code scratch and no second
// packing pass). Same bytes as the scalar loops (tests/kernels/block_kernel_paths_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/avx512_build.h"

#if GRADCOMP_CPU_AVX512_KERNELS
namespace gradcomp::cpu {
struct RoundingFields;
}

namespace gradcomp::cpu::avx512 {

// scalar::qsgdCode for the first (n / 16) * 16 elements of a block whose ratio scaling is the plain
// product (pre == 1, factor inv = fl(s / norm)), `bits` 4 or 8, packed from bit 0 of packed; returns how
// many it wrote. Element i's uniform is uniforms.uniform(i), widened from its field in registers.
size_t qsgdCodesPacked(const float* x, size_t n, int bits, float inv, const RoundingFields& uniforms, uint8_t* packed);

// scalar::ternCode (2 bits, pre == 1, inv = fl(1 / max |x|)) likewise.
size_t ternCodesPacked(const float* x, size_t n, float inv, const RoundingFields& uniforms, uint8_t* packed);

// decodeTernBlock's values (1 -> +maxAbs, 2 -> -maxAbs, 0 and 3 -> +0) of n 2-bit codes packed from bit 0
// of packed, read straight from the payload (16 codes from 4 bytes, no byte-per-code scratch).
void decodeTernCodesPacked(const uint8_t* packed, size_t n, float maxAbs, float* out, bool accumulate);

}  // namespace gradcomp::cpu::avx512
#endif
