// Which vector paths this build of the CPU kernels contains (they are chosen at compile time by -march,
// so the scalar reference runs where neither is compiled in). Reported by the tests that pin the bytes,
// so a log says which paths it checked.
#pragma once

namespace gradcomp::cpu {

inline const char* compiledVectorPaths() {
#if defined(__AVX2__) && defined(__F16C__)
  return "AVX2 + F16C";
#elif defined(__AVX2__)
  return "AVX2 (F16C casts scalar)";
#elif defined(__F16C__)
  return "F16C casts, other kernels scalar";
#else
  return "scalar only";
#endif
}

inline bool compiledWithAvx512() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

}  // namespace gradcomp::cpu
