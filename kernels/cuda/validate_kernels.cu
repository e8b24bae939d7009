// Device payload checks; see validate_kernels.cuh. One grid-stride pass each.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/validate_kernels.cuh"

namespace gradcomp::cuda {
namespace {

using detail::kThreads;

template <typename IsBad>
__global__ void findFirstKernel(size_t count, IsBad isBad, unsigned long long* firstBad) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    if (isBad(i)) detail::recordFirst(firstBad, i);
}

template <typename IsBad>
cudaError_t findFirst(size_t count, IsBad isBad, unsigned long long* firstBad, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  findFirstKernel<<<detail::gridFor(count), kThreads, 0, stream>>>(count, isBad, firstBad);
  return cudaGetLastError();
}

struct BadScale {
  const float* s;
  scalar::ScaleRule rule;
  __device__ bool operator()(size_t i) const { return !scalar::scaleAccepted(s[i], rule); }
};

struct BadOneBitMeans {
  const float* m;
  __device__ bool operator()(size_t b) const {
    const float p = m[2 * b], q = m[2 * b + 1];
    return !(isfinite(p) && p >= 0.0f && isfinite(q) && q <= 0.0f);
  }
};

struct Int8Minimum {
  const int8_t* c;
  __device__ bool operator()(size_t i) const { return c[i] == -128; }
};

struct NonFiniteFp8 {
  const uint8_t* c;
  scalar::Fp8Format fmt;
  __device__ bool operator()(size_t i) const { return !scalar::fp8IsFinite(c[i], fmt); }
};

struct TernaryCode3 {
  const uint8_t* packed;
  __device__ bool operator()(size_t i) const { return ((packed[i >> 2] >> (2 * (i & 3))) & 3u) == 3u; }
};

template <typename Index>
struct BadSparseEntry {
  const Index* idx;
  const void* values;
  bool fp16;
  uint64_t n;
  __device__ bool operator()(size_t j) const {
    const bool finite = fp16 ? scalar::halfIsFinite(static_cast<const uint16_t*>(values)[j])
                             : isfinite(static_cast<const float*>(values)[j]);
    return !finite || idx[j] >= n || (j > 0 && idx[j] <= idx[j - 1]);
  }
};

struct NonFiniteValue {
  const void* values;
  bool fp16;
  float scale;
  __device__ bool operator()(size_t j) const {
    if (fp16) {
      const uint16_t h = static_cast<const uint16_t*>(values)[j];
      return !scalar::halfIsFinite(h) || !scalar::scaledValueDecodes(scalar::halfBitsToFloat(h), scale);
    }
    const float v = static_cast<const float*>(values)[j];
    return !isfinite(v) || !scalar::scaledValueDecodes(v, scale);
  }
};

}  // namespace

cudaError_t launchFindBadScales(const float* scales, size_t count, scalar::ScaleRule rule, unsigned long long* firstBad,
                                cudaStream_t stream) {
  return findFirst(count, BadScale{scales, rule}, firstBad, stream);
}

cudaError_t launchFindBadOneBitMeans(const float* means, size_t blocks, unsigned long long* firstBad,
                                     cudaStream_t stream) {
  return findFirst(blocks, BadOneBitMeans{means}, firstBad, stream);
}

cudaError_t launchFindInt8Minimum(const int8_t* codes, size_t n, unsigned long long* firstBad, cudaStream_t stream) {
  return findFirst(n, Int8Minimum{codes}, firstBad, stream);
}

cudaError_t launchFindNonFiniteFp8(const uint8_t* codes, size_t n, scalar::Fp8Format fmt,
                                   unsigned long long* firstBad, cudaStream_t stream) {
  return findFirst(n, NonFiniteFp8{codes, fmt}, firstBad, stream);
}

cudaError_t launchFindTernaryCode3(const uint8_t* packed, size_t n, unsigned long long* firstBad,
                                   cudaStream_t stream) {
  return findFirst(n, TernaryCode3{packed}, firstBad, stream);
}

cudaError_t launchFindBadSparseEntries(const void* indices, bool wideIndices, const void* values, bool fp16Values,
                                       size_t count, uint64_t n, unsigned long long* firstBad, cudaStream_t stream) {
  if (wideIndices)
    return findFirst(count, BadSparseEntry<uint64_t>{static_cast<const uint64_t*>(indices), values, fp16Values, n},
                     firstBad, stream);
  return findFirst(count, BadSparseEntry<uint32_t>{static_cast<const uint32_t*>(indices), values, fp16Values, n},
                   firstBad, stream);
}

cudaError_t launchFindNonFiniteValues(const void* values, bool fp16Values, float scale, size_t count,
                                      unsigned long long* firstBad, cudaStream_t stream) {
  return findFirst(count, NonFiniteValue{values, fp16Values, scale}, firstBad, stream);
}

}  // namespace gradcomp::cuda
