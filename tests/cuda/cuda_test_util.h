// Helpers shared by the CUDA tests.
#pragma once

#include <cuda_runtime_api.h>

namespace gradcomp::testing {

// GPUs visible to this process (0 when the driver or runtime is missing).
inline int deviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

}  // namespace gradcomp::testing
