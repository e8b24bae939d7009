// Device-side helpers shared by the CUDA kernels (included by .cu files only).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/scalar/host_device.h"

namespace gradcomp::cuda::detail {

constexpr int kThreads = 256;

// Grid for one thread per item, capped so huge inputs use grid-stride loops instead of a grid the
// hardware refuses (2^31 - 1 blocks is the limit; 2^20 blocks of 256 threads is plenty on any GPU).
inline unsigned gridFor(size_t items, int threads = kThreads) {
  const size_t blocks = (items + threads - 1) / threads;
  return static_cast<unsigned>(blocks < (size_t{1} << 20) ? (blocks ? blocks : 1) : (size_t{1} << 20));
}

// CUDA blocks of kThreads for one warp per codec block. 0 when that exceeds the hardware's grid
// limit: the launch then fails with cudaErrorInvalidConfiguration instead of silently truncating.
inline unsigned warpPerBlockGrid(size_t n, size_t blockSize) {
  constexpr size_t kWarps = kThreads / 32;
  const size_t grid = ((n + blockSize - 1) / blockSize + kWarps - 1) / kWarps;
  return grid <= 0x7fffffffu ? static_cast<unsigned>(grid) : 0u;
}

// Records the smallest index at which something went wrong (a non-finite input, an invalid code):
// atomicMin over all threads gives the first one in index order, which is what the CPU reports.
__device__ __forceinline__ void recordFirst(unsigned long long* first, uint64_t index) {
  if (first) atomicMin(first, static_cast<unsigned long long>(index));
}

// c = g + e with e optional (the fused error-feedback input), rounded as the CPU's fp32 add.
__device__ __forceinline__ float addend(const float* g, const float* e, size_t i) {
  return e ? __fadd_rn(g[i], e[i]) : g[i];
}

// c[j] = g[i + j] (+ e[i + j]) for j < 4 as one 16-byte load of each (the caller checked alignment).
__device__ __forceinline__ void addend4(const float* g, const float* e, size_t i, float (&c)[4]) {
  float4 a = *reinterpret_cast<const float4*>(g + i);
  if (e) {
    const float4 b = *reinterpret_cast<const float4*>(e + i);
    a = make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
  }
  c[0] = a.x, c[1] = a.y, c[2] = a.z, c[3] = a.w;
}

__device__ __forceinline__ bool isAligned(const void* p, size_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

}  // namespace gradcomp::cuda::detail
