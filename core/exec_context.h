// Where a codec call runs. Buffers on the CPU are processed by the reference kernels; a CUDA device
// selects the CUDA twins (only when compiled in, otherwise a BackendUnavailable error).
#pragma once

namespace gradcomp {

enum class Device { Cpu, Cuda };

struct ExecContext {
  Device device = Device::Cpu;
  int cudaDevice = 0;
  void* cudaStream = nullptr;  // cudaStream_t, type-erased so CPU-only users need no CUDA headers
  int cpuThreads = 1;          // threads used by tiled CPU kernels (1 = the caller's thread only)
};

}  // namespace gradcomp
