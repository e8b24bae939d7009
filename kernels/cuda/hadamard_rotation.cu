// One CUDA block per rotation block: the block's values in shared memory (8192 floats at most, 32 KiB),
// the butterfly stages one after another with a barrier between them. Each output is the same fp32
// expression as on the CPU (kernels/cpu/hadamard_rotation.cc): the products rounded as __fmul_rn, the
// butterflies a + b and a - b of the same two values, the stages in the same order.
#include <cfloat>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/hadamard_rotation.cuh"

namespace gradcomp::cuda {
namespace {

constexpr int kMaxBlock = 8192;

__device__ __forceinline__ float saturatingScale(float v, float scale) {
  const float r = __fmul_rn(v, scale);
  if (isinf(r) && isfinite(v)) return copysignf(FLT_MAX, v);
  return r;
}

// Rotation blocks [first, first + count) of `size` elements each, starting at element `start`.
__global__ void rotateKernel(const float* x, const float* e, float* y, size_t start, size_t size,
                             scalar::RngStream signs, float scale, float norm, bool inverse) {
  __shared__ float v[kMaxBlock];
  const size_t base = start + static_cast<size_t>(blockIdx.x) * size;
  for (size_t j = threadIdx.x; j < size; j += blockDim.x) {
    const size_t i = base + j;
    if (inverse) {
      v[j] = x[i];
    } else {
      const float c = e ? __fadd_rn(x[i], e[i]) : x[i];
      const float flip = scalar::rotationSignNegative(signs, i) ? -1.0f : 1.0f;
      v[j] = __fmul_rn(__fmul_rn(c, scale), flip);
    }
  }
  __syncthreads();
  for (size_t h = 1; h < size; h <<= 1) {
    for (size_t p = threadIdx.x; p < size / 2; p += blockDim.x) {
      const scalar::ButterflyPair pair = scalar::rotationButterfly(p, h);
      const float s = __fadd_rn(v[pair.a], v[pair.b]), d = __fsub_rn(v[pair.a], v[pair.b]);
      v[pair.a] = s;
      v[pair.b] = d;
    }
    __syncthreads();
  }
  for (size_t j = threadIdx.x; j < size; j += blockDim.x) {
    const size_t i = base + j;
    if (inverse) {
      const float flip = scalar::rotationSignNegative(signs, i) ? -1.0f : 1.0f;
      y[i] = saturatingScale(__fmul_rn(__fmul_rn(v[j], norm), flip), scale);
    } else {
      y[i] = __fmul_rn(v[j], norm);
    }
  }
}

}  // namespace

cudaError_t launchRotate(const float* x, const float* e, float* y, size_t n, size_t blockSize,
                         const scalar::RotationKey& key, float scale, bool inverse, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (blockSize < 1 || blockSize > kMaxBlock || (blockSize & (blockSize - 1))) return cudaErrorInvalidValue;
  if (n / blockSize > 0x7fffffffu) return cudaErrorInvalidConfiguration;  // one CUDA block per rotation block
  const scalar::RngStream signs = scalar::rotationStream(key);
  // The schedule is kernels/scalar/hadamard_rotation.h's (tests/kernels/rotation_device_schedule_test.cc
  // runs it on the host against the CPU's bits).
  scalar::forEachRotationLaunch(n, blockSize, [&](uint64_t start, uint64_t size, uint64_t blocks) {
    rotateKernel<<<static_cast<unsigned>(blocks), static_cast<unsigned>(scalar::rotationThreads(size)), 0, stream>>>(
        x, e, y, start, size, signs, scale, scalar::rotationNorm(size), inverse);
  });
  return cudaGetLastError();
}

}  // namespace gradcomp::cuda
