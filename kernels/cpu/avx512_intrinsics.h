// What a file of AVX-512 kernels includes first: the intrinsics and the target attribute its functions
// (and its lambdas) carry. Only implementation files include it, never a header, because the diagnostic
// pragmas below hold for the rest of the translation unit.
#pragma once

#include "kernels/cpu/avx512_build.h"

#if GRADCOMP_CPU_AVX512_KERNELS
// GCC 12's AVX-512 intrinsics build their pass-through operand with _mm512_undefined_*(), which its own
// -Wmaybe-uninitialized and -Wuninitialized flag wherever they are inlined: a third-party header's
// warning, never ours, and it must not break a -Werror build.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

// The ISA the avx512 path of cpu_path.h checks for (F16C, AVX2 and BMI2 come with every AVX-512 CPU; the
// casts use F16C, terngrad's packing BMI2's pdep).
#define GRADCOMP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,avx2,bmi2")))
// A lambda's call operator takes its own attribute, after the parameter list: GCC does not inherit the
// enclosing function's.
#define GRADCOMP_AVX512_LAMBDA GRADCOMP_AVX512
#endif
