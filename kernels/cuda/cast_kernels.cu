// CUDA twins of the fp16 / bf16 cast kernels (kernels/cpu/cast_kernels.h), built from the same
// scalar conversions (kernels/scalar/float_formats.h), so the bytes match the CPU reference.
// Not yet dispatched by the codecs: the ExecContext dispatch and the parity suite come with the CUDA
// issue; this file keeps the shared scalar math compiling under nvcc for sm_80 / sm_90 in CI.
#include <cuda_runtime.h>

#include "kernels/cuda/cast_kernels.cuh"
#include "kernels/scalar/float_formats.h"

namespace gradcomp::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per element; saturations counted with one atomic per warp.
__global__ void encodeFp16Kernel(const float* __restrict__ in, size_t n, float prescale, uint16_t* __restrict__ out,
                                 unsigned long long* saturated) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  bool sat = false;
  if (i < n) {
    const float v = __fmul_rn(in[i], prescale);
    sat = scalar::absBits(v) >= scalar::kHalfOverflowFloatBits;
    out[i] = scalar::floatToHalfBits(v);
  }
  const unsigned mask = __ballot_sync(0xffffffffu, sat);
  if ((threadIdx.x & 31) == 0 && mask) atomicAdd(saturated, static_cast<unsigned long long>(__popc(mask)));
}

__global__ void decodeFp16Kernel(const uint16_t* __restrict__ in, size_t n, float inversePrescale,
                                 float* __restrict__ out, bool accumulate) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float v = __fmul_rn(scalar::halfBitsToFloat(in[i]), inversePrescale);
  out[i] = accumulate ? __fadd_rn(out[i], v) : v;
}

__global__ void encodeBf16Kernel(const float* __restrict__ in, size_t n, uint16_t* __restrict__ out,
                                 unsigned long long* saturated) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  bool sat = false;
  if (i < n) {
    sat = scalar::bf16Overflows(in[i]);
    out[i] = scalar::floatToBf16Bits(in[i]);
  }
  const unsigned mask = __ballot_sync(0xffffffffu, sat);
  if ((threadIdx.x & 31) == 0 && mask) atomicAdd(saturated, static_cast<unsigned long long>(__popc(mask)));
}

unsigned grid(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t launchEncodeFp16(const float* in, size_t n, float prescale, uint16_t* out, unsigned long long* saturated,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  encodeFp16Kernel<<<grid(n), kThreads, 0, stream>>>(in, n, prescale, out, saturated);
  return cudaGetLastError();
}

cudaError_t launchDecodeFp16(const uint16_t* in, size_t n, float inversePrescale, float* out, bool accumulate,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  decodeFp16Kernel<<<grid(n), kThreads, 0, stream>>>(in, n, inversePrescale, out, accumulate);
  return cudaGetLastError();
}

cudaError_t launchEncodeBf16(const float* in, size_t n, uint16_t* out, unsigned long long* saturated,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  encodeBf16Kernel<<<grid(n), kThreads, 0, stream>>>(in, n, out, saturated);
  return cudaGetLastError();
}

}  // namespace gradcomp::cuda
