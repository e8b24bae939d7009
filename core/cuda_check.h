// GRADCOMP_CUDA_CHECK: wraps a CUDA runtime call; a failure is a BackendUnavailable naming the call and
// CUDA's message. Include only from sources compiled with CUDA (GRADCOMP_HAVE_CUDA).
#pragma once

#include <cuda_runtime_api.h>

#include "core/error.h"

#define GRADCOMP_CUDA_CHECK(call)                                                                    \
  do {                                                                                               \
    const cudaError_t gcErr_ = (call);                                                               \
    if (gcErr_ != cudaSuccess)                                                                       \
      GRADCOMP_THROW(::gradcomp::BackendUnavailable, #call " failed: ", cudaGetErrorString(gcErr_)); \
  } while (0)
