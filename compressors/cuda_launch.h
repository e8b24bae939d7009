// What a codec's CUDA twin needs to launch its kernels (included by the codec files under
// GRADCOMP_HAVE_CUDA only, so a build without CUDA never sees the runtime header): the stream of a
// BlockCodec::Device* argument, the error check every launch goes through, and stream-ordered scratch.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>

#include "core/cuda_check.h"

namespace gradcomp::cudapath {

inline cudaStream_t asStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Throws BackendUnavailable naming `what` unless err is cudaSuccess (an assert inside a kernel: Error).
void check(cudaError_t err, const char* what);

// Stream-ordered device scratch.
template <typename T>
class DeviceScratch {
 public:
  DeviceScratch(size_t count, cudaStream_t stream) : stream_(stream) {
    GRADCOMP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p_), std::max<size_t>(count, 1) * sizeof(T), stream));
  }
  ~DeviceScratch() { cudaFreeAsync(p_, stream_); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace gradcomp::cudapath
