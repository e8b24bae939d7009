// Which vector path the CPU kernels take, chosen at run time.
//   avx512  AVX-512 F/BW/VL/DQ kernels (their own file, compiled for that ISA whatever -march says), taken
//           where the CPU reports those features;
//   avx2    the AVX2 + F16C kernels, compiled in when -march has them;
//   scalar  the reference loops, always there.
// Every path writes the same bytes (tests pin each one the CPU can run to the scalar reference and to
// the golden wire hashes). GRADCOMP_CPU_PATH=scalar|avx2|avx512 lowers the choice for a process;
// setCpuPath does it for tests and benchmarks. `gradcomp codecs` prints the path it used.
#pragma once

namespace gradcomp::cpu {

enum class CpuPath : int { Scalar = 0, Avx2 = 1, Avx512 = 2 };

// The best path this CPU runs and this build contains.
CpuPath supportedCpuPath();
// The path the kernels take now: supported, or lower when GRADCOMP_CPU_PATH or setCpuPath asked.
CpuPath activeCpuPath();
// Throws InvalidArgument when `path` is above supportedCpuPath().
void setCpuPath(CpuPath path);
const char* cpuPathName(CpuPath path);
// "avx512" | "avx2" | "scalar" -> the path; throws InvalidArgument naming the text otherwise.
CpuPath parseCpuPath(const char* name);

}  // namespace gradcomp::cpu
