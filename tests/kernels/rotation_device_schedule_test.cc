// The CUDA rotation kernel's schedule (kernels/cuda/hadamard_rotation.cu) run on the host: its launches
// (scalar::forEachRotationLaunch), one CUDA block per rotation block, each block's threads taking the
// stage's butterflies p = t, t + T, ... (scalar::rotationButterfly, T = scalar::rotationThreads), with the
// kernel's fp32 expressions in the kernel's order. It must give the CPU's bits (cpu::rotateForward /
// rotateInverse), which is what lets the device rotate to the CPU's bytes, and no two butterflies of a
// stage may share an element (the kernel's threads would race). The GPU parity suite checks the kernel
// itself where a GPU is present; this is what can be checked here.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/hadamard_rotation.h"
#include "kernels/scalar/hadamard_rotation.h"

namespace gradcomp {
namespace {

// The kernel on the host. `e` may be null (the fused residual of the forward direction). The threads of a
// stage run last to first here: the kernel's threads run in any order, so a schedule whose result
// depended on it would show.
std::vector<float> emulateKernel(const std::vector<float>& x, const float* e, size_t b, const scalar::RotationKey& key,
                                 float scale, bool inverse) {
  const size_t n = x.size();
  std::vector<float> y(n, std::nanf(""));
  std::vector<uint32_t> written(n, 0);
  const scalar::RngStream signs = scalar::rotationStream(key);
  scalar::forEachRotationLaunch(n, b, [&](uint64_t start, uint64_t size, uint64_t blocks) {
    const uint64_t threads = scalar::rotationThreads(size);
    EXPECT_TRUE(threads >= 1 && threads <= scalar::kRotationMaxThreads);
    const float norm = scalar::rotationNorm(size);
    for (uint64_t block = 0; block < blocks; ++block) {
      const uint64_t base = start + block * size;
      std::vector<float> v(size);
      for (uint64_t j = 0; j < size; ++j) {
        const uint64_t i = base + j;
        if (inverse) {
          v[j] = x[i];
        } else {
          const float c = e ? x[i] + e[i] : x[i];
          const float flip = scalar::rotationSignNegative(signs, i) ? -1.0f : 1.0f;
          v[j] = (c * scale) * flip;
        }
      }
      for (uint64_t h = 1; h < size; h <<= 1) {
        std::vector<uint8_t> touched(size, 0);
        for (uint64_t t = threads; t-- > 0;)
          for (uint64_t p = t; p < size / 2; p += threads) {
            const scalar::ButterflyPair pair = scalar::rotationButterfly(p, h);
            EXPECT_TRUE(pair.b == pair.a + h && pair.b < size) << "butterfly " << p << " of span " << h;
            EXPECT_EQ(touched[pair.a]++ + touched[pair.b]++, 0)
                << "span " << h << ": butterfly " << p << " shares an element with another of its stage";
            const float s = v[pair.a] + v[pair.b], d = v[pair.a] - v[pair.b];
            v[pair.a] = s;
            v[pair.b] = d;
          }
      }
      for (uint64_t j = 0; j < size; ++j) {
        const uint64_t i = base + j;
        ++written[i];
        if (inverse) {
          const float flip = scalar::rotationSignNegative(signs, i) ? -1.0f : 1.0f;
          const float u = (v[j] * norm) * flip, r = u * scale;
          y[i] = std::isinf(r) && std::isfinite(u) ? std::copysign(FLT_MAX, u) : r;
        } else {
          y[i] = v[j] * norm;
        }
      }
    }
  });
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(written[i], 1u) << "element " << i << " written " << written[i] << " times";
  return y;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The launches name the blocks rotationBlockOf does, in order, each element in one block.
TEST(RotationDeviceSchedule, LaunchesCoverTheTensorInTheBlocksOfTheCpu) {
  for (uint64_t b : {uint64_t{1}, uint64_t{2}, uint64_t{256}, uint64_t{8192}})
    for (uint64_t n : {uint64_t{1}, uint64_t{9}, uint64_t{1000}, uint64_t{8192}, uint64_t{3 * 8192 + 4095}}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " b " << b);
      uint64_t next = 0, launches = 0;
      scalar::forEachRotationLaunch(n, b, [&](uint64_t start, uint64_t size, uint64_t blocks) {
        ++launches;
        ASSERT_EQ(start, next);
        ASSERT_GE(blocks, 1u);
        for (uint64_t k = 0; k < blocks; ++k) {
          const scalar::RotationBlock cpu = scalar::rotationBlockOf(start + k * size, n, b);
          ASSERT_EQ(cpu.start, start + k * size);
          ASSERT_EQ(cpu.size, size);
        }
        next = start + blocks * size;
      });
      EXPECT_EQ(next, n);
      EXPECT_LE(launches, 1 + 13u);  // the full blocks, then at most one per smaller power of two
    }
}

TEST(RotationDeviceSchedule, TheKernelsScheduleGivesTheCpusBitsBothWays) {
  const scalar::RotationKey key{3, 17, 5};
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  for (size_t b : {size_t{2}, size_t{32}, size_t{1024}, size_t{2048}, size_t{8192}})
    for (size_t n : {b, 2 * b + b / 2 + 3, size_t{20001}}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " b " << b);
      std::vector<float> x(n), e(n);
      for (size_t i = 0; i < n; ++i) x[i] = normal(rng), e[i] = 0.1f * normal(rng);
      // Forward with the fused residual: the CPU rotates x + e.
      std::vector<float> sum(n), want(n);
      for (size_t i = 0; i < n; ++i) sum[i] = x[i] + e[i];
      cpu::rotateForward(sum.data(), want.data(), n, b, key, 0.25f);
      const auto forward = emulateKernel(x, e.data(), b, key, 0.25f, false);
      ASSERT_TRUE(sameBits(forward, want));
      ASSERT_TRUE(sameBits(emulateKernel(sum, nullptr, b, key, 0.25f, false), want));
      // Inverse, with values whose postscaled products overflow: saturated as on the CPU.
      std::vector<float> big = forward;
      for (size_t i = 0; i < n; i += 7) big[i] *= 3e36f;
      for (const float postscale : {4.0f, 0x1p12f}) {
        std::vector<float> back(n);
        cpu::rotateInverse(big.data(), back.data(), n, b, key, postscale);
        ASSERT_TRUE(sameBits(emulateKernel(big, nullptr, b, key, postscale, true), back)) << "postscale " << postscale;
      }
    }
}

}  // namespace
}  // namespace gradcomp
