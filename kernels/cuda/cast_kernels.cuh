// Launchers of the CUDA cast kernels (see cast_kernels.cu). Device pointers; `saturated` is a device
// counter the kernels add to.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace gradcomp::cuda {

cudaError_t launchEncodeFp16(const float* in, size_t n, float prescale, uint16_t* out, unsigned long long* saturated,
                             cudaStream_t stream);
cudaError_t launchDecodeFp16(const uint16_t* in, size_t n, float inversePrescale, float* out, bool accumulate,
                             cudaStream_t stream);
cudaError_t launchEncodeBf16(const float* in, size_t n, uint16_t* out, unsigned long long* saturated,
                             cudaStream_t stream);

}  // namespace gradcomp::cuda
