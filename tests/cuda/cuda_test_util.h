// Helpers shared by the CUDA tests.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <random>
#include <span>
#include <vector>

namespace gradcomp::testing {

// GPUs visible to this process (0 when the driver or runtime is missing).
inline int deviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Normal(0, 1) input with the cases that break kernels: zeros at both signs (sign's parity rule),
// outliers times `outlierScale` (saturation, tiny block scales), subnormals, and repeated values
// (ties for the selections).
inline std::vector<float> parityInput(size_t n, uint64_t seed, float outlierScale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = normal(rng);
    if (i % 97 == 5) x[i] = 0.0f;
    if (i % 101 == 7) x[i] = -0.0f;
    if (i % 1009 == 11) x[i] *= outlierScale;
    if (i % 1013 == 13) x[i] = 1e-40f;
    if (i % 211 == 17) x[i] = x[i - 1];
  }
  return x;
}

// Device memory holding `count` T, `offset` elements past a 256-byte aligned allocation (misaligned
// pointers on purpose), pre-filled with 0x5a bytes so that anything a kernel fails to write shows up.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count, size_t offset = 0) : n_(count) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&base_), (count + offset + 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemset(base_, 0x5a, (count + offset + 1) * sizeof(T)), cudaSuccess);
    ptr_ = base_ + offset;
  }
  DeviceArray(const std::vector<T>& host, size_t offset) : DeviceArray(host.size(), offset) { put(host); }
  ~DeviceArray() { cudaFree(base_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void put(const std::vector<T>& host) {
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> get(size_t count) const {
    std::vector<T> h(count);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr_, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  std::vector<T> get() const { return get(n_); }
  T* data() const { return ptr_; }
  std::span<T> span() const { return {ptr_, n_}; }

 private:
  T* base_ = nullptr;
  T* ptr_ = nullptr;
  size_t n_;
};

}  // namespace gradcomp::testing
