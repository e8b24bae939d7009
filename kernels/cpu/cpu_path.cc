#include "kernels/cpu/cpu_path.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/avx512_build.h"

namespace gradcomp::cpu {
namespace {

bool cpuHasAvx512() {
#if GRADCOMP_CPU_AVX512_KERNELS
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("bmi2");
#else
  return false;
#endif
}

CpuPath detect() {
  if (cpuHasAvx512()) return CpuPath::Avx512;
#if defined(__AVX2__) && defined(__F16C__)
  return CpuPath::Avx2;  // compiled for it: the build would not run on a CPU without it
#else
  return CpuPath::Scalar;
#endif
}

// The AVX2 kernels exist only when -march enabled AVX2 + F16C; an AVX-512 CPU asked for avx2 in a build
// without them gets the scalar loops.
CpuPath lowerFor(CpuPath p) {
#if !(defined(__AVX2__) && defined(__F16C__))
  if (p == CpuPath::Avx2) return CpuPath::Scalar;
#endif
  return p;
}

std::atomic<int>& active() {
  static std::atomic<int> path = [] {
    CpuPath p = detect();
    if (const char* env = std::getenv("GRADCOMP_CPU_PATH"); env && *env) {
      const CpuPath asked = parseCpuPath(env);
      if (asked < p) p = lowerFor(asked);
    }
    return static_cast<int>(p);
  }();
  return path;
}

}  // namespace

CpuPath supportedCpuPath() {
  static const CpuPath p = detect();
  return p;
}

CpuPath activeCpuPath() { return static_cast<CpuPath>(active().load(std::memory_order_relaxed)); }

void setCpuPath(CpuPath path) {
  GRADCOMP_CHECK_ARG(path <= supportedCpuPath(), "CPU path '", cpuPathName(path), "' is not available here (this CPU and build: ",
                     cpuPathName(supportedCpuPath()), ")");
  active().store(static_cast<int>(lowerFor(path)), std::memory_order_relaxed);
}

const char* cpuPathName(CpuPath path) {
  switch (path) {
    case CpuPath::Avx512: return "avx512";
    case CpuPath::Avx2: return "avx2";
    case CpuPath::Scalar: return "scalar";
  }
  return "?";
}

CpuPath parseCpuPath(const char* name) {
  for (CpuPath p : {CpuPath::Scalar, CpuPath::Avx2, CpuPath::Avx512})
    if (std::strcmp(name, cpuPathName(p)) == 0) return p;
  GRADCOMP_THROW(InvalidArgument, "CPU path '", name, "' is not one of avx512, avx2, scalar");
}

}  // namespace gradcomp::cpu
