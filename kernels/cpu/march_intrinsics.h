// What a file whose vector code is compiled for the build's -march (not run-time dispatched: Philox's
// batches, the rotation's blocks) includes first: <immintrin.h>, where the build targets AVX2 or more.
// Only implementation files include it, first, never a header: the diagnostic pragmas below hold for the
// rest of the translation unit, and they must come before anything includes <immintrin.h>.
#pragma once

#if defined(__AVX2__)
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
// GCC 12's AVX-512 intrinsics pass an "undefined" vector that its own -Wmaybe-uninitialized flags inside
// avx512fintrin.h once inlined (GCC bug 105593, fixed in 13), and -Wuninitialized for the permutes'
// pass-through operand: a third-party header's warning, which must not break the -Werror build. Its
// location is the header, so a pragma after the include would not reach it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#endif
