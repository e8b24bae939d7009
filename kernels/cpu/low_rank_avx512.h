// AVX-512 versions of PowerSGD's three products (low_rank_avx512.cc), called by low_rank.cc when
// cpu_path.h selects the avx512 path. Same contracts and the same bits as low_rank.h's loops: every sum in
// the order low_rank.cc fixes, every product and sum one rounding (no FMA).
#pragma once

#include <cstddef>

#include "kernels/cpu/avx512_build.h"

#if GRADCOMP_CPU_AVX512_KERNELS
namespace gradcomp::cpu::avx512 {

// C (n x r) = A (n x m) B (m x r), given B's columns contiguous (bt, r x m).
void matmulRowsByColumns(const float* a, size_t n, size_t m, const float* bt, size_t r, float* c);
// acc (r x m, B's columns of the result) += A^T B over A's n rows (A n x m, B n x r), row by row in order.
void accumulateTransposedA(const float* a, size_t n, size_t m, const float* b, size_t r, float* acc);
// C (n x m) = A (n x r) B^T, given B's columns contiguous (bt, r x m).
void matmulTransposedBRows(const float* a, size_t n, size_t r, const float* bt, size_t m, float* c);

}  // namespace gradcomp::cpu::avx512
#endif
