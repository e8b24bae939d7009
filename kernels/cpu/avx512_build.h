// Whether this build contains the AVX-512 kernels (the *_avx512.cc files). They are compiled on every
// x86-64 GCC / clang build, each function with a target attribute rather than the file with a -mavx512
// flag, so the build stays runnable on CPUs without AVX-512; cpu_path.h decides at run time whether they
// are called.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GRADCOMP_CPU_AVX512_KERNELS 1
#else
#define GRADCOMP_CPU_AVX512_KERNELS 0
#endif
