// GPU vs CPU parity of the block-scaled int8 / FP8 and scaled-sign kernels at the launcher level (the
// codec-level suite, codec_parity_test.cc, covers every codec through Compressor): the same codes,
// scales, bits, residuals and decoded sums, byte for byte, over a size sweep with odd sizes, blocks
// that end mid-way, misaligned device pointers, zeros, extremes and stochastic rounding. Built wherever
// CUDA is; registered in ctest only where a GPU answers, and run by scripts/gpu-check.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/block_scale_kernels.h"
#include "kernels/cpu/sign_kernels.h"
#include "kernels/cpu/low_rank.h"
#include "kernels/cuda/block_scale_kernels.cuh"
#include "kernels/cuda/low_rank.cuh"
#include "tests/cuda/cuda_test_util.h"

namespace gradcomp {
namespace {

template <typename T>
using DeviceVector = testing::DeviceArray<T>;

std::vector<float> testInput(size_t n, uint64_t seed) { return testing::parityInput(n, seed, 1e30f); }

template <typename T>
bool sameBytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// The size sweep; GRADCOMP_PARITY_MAX_N caps it (scripts/gpu-check under compute-sanitizer, which is
// slow on the CPU reference's side of large sizes).
std::vector<size_t> sizes() {
  const char* cap = std::getenv("GRADCOMP_PARITY_MAX_N");
  const size_t maxN = cap ? std::strtoull(cap, nullptr, 10) : SIZE_MAX;
  std::vector<size_t> v;
  for (size_t n : {size_t{1}, size_t{7}, size_t{31}, size_t{255}, size_t{256}, size_t{1000}, size_t{4097},
                   size_t{65536 + 3}, size_t{1} << 20})
    if (n <= maxN) v.push_back(n);
  return v;
}

TEST(KernelParity, Int8NearestAndStochasticWithResidualAndDecodeAccumulate) {
  const scalar::RngStream rng = scalar::RngStream::make(42, 3, 7, 11);
  for (size_t n : sizes())
    for (size_t block : {size_t{256}, size_t{100}})
      for (bool stochastic : {false, true})
        for (size_t offset : {size_t{0}, size_t{1}}) {
          SCOPED_TRACE(::testing::Message() << "n=" << n << " block=" << block << " stochastic=" << stochastic
                                            << " offset=" << offset);
          const auto x = testInput(n, n + block);
          const size_t blocks = (n + block - 1) / block;
          std::vector<int8_t> codes(n);
          std::vector<float> scales(blocks), residual(n), decoded(n, 0.5f);
          std::vector<uint32_t> words;
          for (size_t b = 0; b < blocks; ++b) {
            const size_t b0 = b * block, len = std::min(block, n - b0);
            const cpu::RoundingFields u = stochastic ? cpu::fillRoundingFields(rng, b0, len, words) : cpu::RoundingFields{};
            scales[b] = cpu::encodeInt8Block(x.data() + b0, len, u, codes.data() + b0);
            for (size_t i = 0; i < len; ++i)
              residual[b0 + i] = x[b0 + i] - static_cast<float>(codes[b0 + i]) * (1.0f / scales[b]);
            cpu::decodeInt8Block(codes.data() + b0, len, scales[b], decoded.data() + b0, true);
          }
          DeviceVector<float> dx(x, offset), dScales(blocks), dResidual(n, offset), dOut(std::vector<float>(n, 0.5f), offset);
          DeviceVector<int8_t> dCodes(n, offset);
          ASSERT_EQ(cuda::launchEncodeInt8Blocks(dx.data(), nullptr, n, block, stochastic, rng, 0, dCodes.data(), dScales.data(),
                                                 dResidual.data(), nullptr, nullptr), cudaSuccess);
          ASSERT_EQ(cuda::launchDecodeInt8Blocks(dCodes.data(), n, block, dScales.data(), dOut.data(), true, nullptr), cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          EXPECT_TRUE(sameBytes(dCodes.get(), codes));
          EXPECT_TRUE(sameBytes(dScales.get(), scales));
          EXPECT_TRUE(sameBytes(dResidual.get(), residual));
          EXPECT_TRUE(sameBytes(dOut.get(), decoded));
        }
}

TEST(KernelParity, Fp8BothFormatsWithSaturationCountResidualAndDecode) {
  for (auto fmt : {scalar::Fp8Format::E4M3, scalar::Fp8Format::E5M2})
    for (size_t n : sizes())
      for (size_t block : {size_t{128}, size_t{77}})
        for (size_t offset : {size_t{0}, size_t{3}}) {
          SCOPED_TRACE(::testing::Message() << "fmt=" << static_cast<int>(fmt) << " n=" << n << " block=" << block
                                            << " offset=" << offset);
          const auto x = testInput(n, 3 * n + block);
          const size_t blocks = (n + block - 1) / block;
          std::vector<uint8_t> codes(n);
          std::vector<float> scales(blocks), residual(n), decoded(n, -1.25f);
          uint64_t saturated = 0;
          cpu::encodeFp8Blocks(x.data(), n, block, fmt, codes.data(), scales.data(), saturated, residual.data());
          for (size_t b = 0; b < blocks; ++b) {
            const size_t b0 = b * block, len = std::min(block, n - b0);
            cpu::decodeFp8Block(codes.data() + b0, len, fmt, scales[b], decoded.data() + b0, true);
          }
          DeviceVector<float> dx(x, offset), dScales(blocks), dResidual(n, offset),
              dOut(std::vector<float>(n, -1.25f), offset);
          DeviceVector<uint8_t> dCodes(n, offset);
          DeviceVector<unsigned long long> dSaturated(std::vector<unsigned long long>{0}, 0);
          ASSERT_EQ(cuda::launchEncodeFp8Blocks(dx.data(), nullptr, n, block, fmt, dCodes.data(), dScales.data(), dSaturated.data(),
                                                dResidual.data(), nullptr, nullptr), cudaSuccess);
          ASSERT_EQ(cuda::launchDecodeFp8Blocks(dCodes.data(), n, block, fmt, dScales.data(), dOut.data(), true, nullptr),
                    cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          EXPECT_TRUE(sameBytes(dCodes.get(), codes));
          EXPECT_TRUE(sameBytes(dScales.get(), scales));
          EXPECT_TRUE(sameBytes(dResidual.get(), residual));
          EXPECT_TRUE(sameBytes(dOut.get(), decoded));
          EXPECT_EQ(dSaturated.get()[0], saturated);
        }
}

TEST(KernelParity, SignBitsScalesResidualAndDecode) {
  for (size_t n : sizes())
    for (size_t block : {size_t{1024}, size_t{32}, size_t{96}})
      for (size_t offset : {size_t{0}, size_t{1}}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " block=" << block << " offset=" << offset);
        const auto x = testInput(n, 7 * n + block);
        const size_t blocks = (n + block - 1) / block, bytes = (n + 7) / 8;
        std::vector<uint8_t> bits(bytes, 0);
        std::vector<float> scales(blocks), residual(n), decoded(n, 2.0f);
        for (size_t b = 0; b < blocks; ++b) {
          const size_t b0 = b * block, len = std::min(block, n - b0);
          scales[b] = cpu::encodeSignBlock(x.data() + b0, len, b0, bits.data() + b0 / 8);
          cpu::decodeSignBlock(bits.data() + b0 / 8, 0, len, scales[b], decoded.data() + b0, true);
          for (size_t i = 0; i < len; ++i) {
            const bool bit = (bits[(b0 + i) / 8] >> ((b0 + i) % 8)) & 1u;
            residual[b0 + i] = x[b0 + i] - ((bit ? scales[b] : -scales[b]) + 0.0f);
          }
        }
        DeviceVector<float> dx(x, offset), dScales(blocks), dResidual(n, offset), dOut(std::vector<float>(n, 2.0f), offset);
        DeviceVector<uint8_t> dBits(bytes, offset);
        ASSERT_EQ(cuda::launchEncodeSignBlocks(dx.data(), nullptr, n, block, dBits.data(), dScales.data(), dResidual.data(), nullptr,
                                               nullptr), cudaSuccess);
        ASSERT_EQ(cuda::launchDecodeSignBlocks(dBits.data(), n, block, dScales.data(), dOut.data(), true, nullptr), cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_TRUE(sameBytes(dBits.get(), bits));
        EXPECT_TRUE(sameBytes(dScales.get(), scales));
        EXPECT_TRUE(sameBytes(dResidual.get(), residual));
        EXPECT_TRUE(sameBytes(dOut.get(), decoded));
      }
}

TEST(KernelParity, BadBlockSizesAreRefusedNotRun) {
  DeviceVector<float> x(64);
  DeviceVector<uint8_t> bits(8);
  DeviceVector<float> scales(4);
  EXPECT_EQ(cuda::launchEncodeSignBlocks(x.data(), nullptr, 64, 48, bits.data(), scales.data(), nullptr, nullptr, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launchEncodeInt8Blocks(x.data(), nullptr, 64, 0, false, {}, 0, nullptr, scales.data(), nullptr, nullptr,
                                         nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launchEncodeFp8Blocks(x.data(), nullptr, 0, 0, scalar::Fp8Format::E4M3, nullptr, nullptr, nullptr,
                                        nullptr, nullptr, nullptr), cudaSuccess);  // n = 0: nothing to do
}


// PowerSGD's device math (kernels/cuda/low_rank.cuh). The orthogonalization runs the CPU's summation
// order, so its bits are the CPU's; the cuBLAS products sum in their own order, so each output is within
// a bound of the CPU's: |gpu - cpu| <= 4 x k x 2^-24 x sum_t |a_t b_t| (k terms, fp32 rounding of a
// length-k dot in any order, with a factor 4 of slack; plus 1e-35 for terms that underflow), checked
// element by element.
TEST(KernelParity, LowRankOrthogonalizationBitsAndProductsWithinTheRoundingBound) {
  std::string why;
  std::unique_ptr<cuda::LowRankBlas> blas(cuda::LowRankBlas::create(nullptr, &why));
  ASSERT_TRUE(blas) << why;
  for (size_t rows : {size_t{1}, size_t{9}, size_t{257}, size_t{4097}})
    for (size_t cols : {size_t{1}, size_t{2}, size_t{5}, size_t{33}}) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
      for (float epsilon : {1e-8f, 0.0f}) {
        auto a = testing::parityInput(rows * cols, rows * 7 + cols, 1.0f);
        DeviceVector<float> d(a, 1);
        cpu::orthogonalizeColumns(a.data(), rows, cols, epsilon);
        ASSERT_EQ(cuda::launchOrthogonalizeColumns(d.data(), rows, cols, epsilon, nullptr), cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_TRUE(sameBytes(d.get(), a)) << "epsilon " << epsilon;
      }
      // M (rows x m) with m = 3 cols + 1 inner columns, X the skinny factor.
      const size_t m = 3 * cols + 1;
      const auto mat = testing::parityInput(rows * m, rows + m, 1.0f);
      const auto x = testing::parityInput(m * cols, m, 1.0f), y = testing::parityInput(rows * cols, rows, 1.0f);
      DeviceVector<float> dM(mat, 0), dX(x, 0), dY(y, 0), dOut(std::max(rows, m) * std::max(m, cols), 0);
      auto expectNear = [&](const std::vector<float>& cpu, const std::vector<float>& bound, const char* what) {
        const auto gpu = dOut.get(cpu.size());
        for (size_t i = 0; i < cpu.size(); ++i)
          ASSERT_LE(std::fabs(gpu[i] - cpu[i]), bound[i]) << what << " element " << i << ": " << gpu[i] << " vs " << cpu[i];
      };
      auto magnitude = [](const std::vector<float>& v) {
        std::vector<float> r(v.size());
        for (size_t i = 0; i < v.size(); ++i) r[i] = std::fabs(v[i]);
        return r;
      };
      const auto absM = magnitude(mat), absX = magnitude(x), absY = magnitude(y);
      auto scaled = [](std::vector<float> v, size_t k) {
        for (float& e : v) e = e * 4.0f * static_cast<float>(k) * 0x1p-24f + 1e-35f;  // + underflowed terms
        return v;
      };
      std::vector<float> c(rows * cols), bound(rows * cols);
      cpu::matmul(mat.data(), rows, m, x.data(), cols, c.data());
      cpu::matmul(absM.data(), rows, m, absX.data(), cols, bound.data());
      ASSERT_EQ(blas->matmul(dM.data(), rows, m, dX.data(), cols, dOut.data()), "");
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      expectNear(c, scaled(bound, m), "M X");
      c.assign(m * cols, 0), bound.assign(m * cols, 0);
      cpu::matmulTransposedA(mat.data(), rows, m, y.data(), cols, c.data());
      cpu::matmulTransposedA(absM.data(), rows, m, absY.data(), cols, bound.data());
      ASSERT_EQ(blas->matmulTransposedA(dM.data(), rows, m, dY.data(), cols, dOut.data()), "");
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      expectNear(c, scaled(bound, rows), "M^T Y");
      c.assign(rows * m, 0), bound.assign(rows * m, 0);
      cpu::matmulTransposedB(y.data(), rows, cols, x.data(), m, c.data());
      cpu::matmulTransposedB(absY.data(), rows, cols, absX.data(), m, bound.data());
      ASSERT_EQ(blas->matmulTransposedB(dY.data(), rows, cols, dX.data(), m, dOut.data()), "");
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      expectNear(c, scaled(bound, cols), "Y X^T");
    }
}

// The batched forms (PowerSGD's batch option) over more matrices than one launch takes (kMaxBatch + 2),
// each at an address out of order: every matrix gets the single call's result (the orthogonalization's
// and the element-wise steps' bits; the products within the bound above).
TEST(KernelParity, LowRankBatchesGiveEachMatrixItsSingleCallResult) {
  std::string why;
  std::unique_ptr<cuda::LowRankBlas> blas(cuda::LowRankBlas::create(nullptr, &why));
  ASSERT_TRUE(blas) << why;
  const size_t count = cuda::kMaxBatch + 2, rows = 33, cols = 3, m = 7;
  auto slot = [&](size_t i) { return (i * 37) % count; };  // 37 and 130 share no factor: a permutation
  auto addresses = [&](float* base, size_t size) {
    std::vector<float*> at(count);
    for (size_t i = 0; i < count; ++i) at[i] = base + slot(i) * size;
    return at;
  };
  auto readOnly = [](const std::vector<float*>& v) { return std::vector<const float*>(v.begin(), v.end()); };
  auto sync = [] { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); };
  {
    auto a = testing::parityInput(count * rows * cols, 5, 1.0f);
    DeviceVector<float> d(a, 0);
    ASSERT_EQ(cuda::launchOrthogonalizeColumns(addresses(d.data(), rows * cols).data(), count, rows, cols, 1e-8f,
                                               nullptr),
              cudaSuccess);
    sync();
    for (size_t i = 0; i < count; ++i) cpu::orthogonalizeColumns(a.data() + i * rows * cols, rows, cols, 1e-8f);
    EXPECT_TRUE(sameBytes(d.get(), a)) << "the batched orthogonalization";
  }
  // The three products: C_i = op(A_i, B_i), against cpu's within 4 k 2^-24 sum |a b| + 1e-35.
  const auto mat = testing::parityInput(count * rows * m, 6, 1.0f), x = testing::parityInput(count * m * cols, 7, 1.0f),
             y = testing::parityInput(count * rows * cols, 8, 1.0f);
  DeviceVector<float> dM(mat, 0), dX(x, 0), dY(y, 0), dOut(count * std::max(rows, m) * std::max(m, cols), 0);
  auto magnitude = [](std::vector<float> v) {
    for (float& e : v) e = std::fabs(e);
    return v;
  };
  struct Product {
    const char* what;
    const std::vector<float>*a, *b;
    DeviceVector<float>*da, *db;
    size_t aSize, bSize, outSize, k;
  };
  for (const Product& pr : {Product{"M X", &mat, &x, &dM, &dX, rows * m, m * cols, rows * cols, m},
                            Product{"M^T Y", &mat, &y, &dM, &dY, rows * m, rows * cols, m * cols, rows},
                            Product{"Y X^T", &y, &x, &dY, &dX, rows * cols, m * cols, rows * m, cols}}) {
    SCOPED_TRACE(pr.what);
    const auto outs = addresses(dOut.data(), pr.outSize);
    const auto as = readOnly(addresses(pr.da->data(), pr.aSize)), bs = readOnly(addresses(pr.db->data(), pr.bSize));
    const std::string what(pr.what);
    if (what == "M X") {
      ASSERT_EQ(blas->matmul(as.data(), rows, m, bs.data(), cols, outs.data(), count), "");
    }
    if (what == "M^T Y") {
      ASSERT_EQ(blas->matmulTransposedA(as.data(), rows, m, bs.data(), cols, outs.data(), count), "");
    }
    if (what == "Y X^T") {
      ASSERT_EQ(blas->matmulTransposedB(as.data(), rows, cols, bs.data(), m, outs.data(), count), "");
    }
    sync();
    const auto gpu = dOut.get(count * pr.outSize);
    const auto absA = magnitude(*pr.a), absB = magnitude(*pr.b);
    std::vector<float> c(pr.outSize), bound(pr.outSize);
    for (size_t i = 0; i < count; ++i) {
      const size_t at = slot(i);
      const float *a = pr.a->data() + at * pr.aSize, *b = pr.b->data() + at * pr.bSize;
      const float *aa = absA.data() + at * pr.aSize, *ab = absB.data() + at * pr.bSize;
      if (what == "M X") cpu::matmul(a, rows, m, b, cols, c.data()), cpu::matmul(aa, rows, m, ab, cols, bound.data());
      if (what == "M^T Y")
        cpu::matmulTransposedA(a, rows, m, b, cols, c.data()), cpu::matmulTransposedA(aa, rows, m, ab, cols, bound.data());
      if (what == "Y X^T")
        cpu::matmulTransposedB(a, rows, cols, b, m, c.data()), cpu::matmulTransposedB(aa, rows, cols, ab, m, bound.data());
      for (size_t e = 0; e < pr.outSize; ++e) {
        const float limit = bound[e] * 4.0f * static_cast<float>(pr.k) * 0x1p-24f + 1e-35f;
        ASSERT_LE(std::fabs(gpu[at * pr.outSize + e] - c[e]), limit) << "matrix " << i << " element " << e;
      }
    }
  }
  // The element-wise steps, on the matrices M: add (with and without e), residual, divide in place.
  const size_t n = rows * m;
  const auto e = testing::parityInput(count * n, 9, 1.0f), approx = testing::parityInput(count * n, 10, 3.0f);
  DeviceVector<float> dE(e, 0), dApprox(approx, 0), dC(count * n, 0);
  const auto g = readOnly(addresses(dM.data(), n)), es = readOnly(addresses(dE.data(), n));
  const auto cs = addresses(dC.data(), n);
  ASSERT_EQ(cuda::launchAddBatch(g.data(), nullptr, cs.data(), count, n, nullptr), cudaSuccess);
  sync();
  EXPECT_TRUE(sameBytes(dC.get(), mat)) << "add without e (a copy)";
  ASSERT_EQ(cuda::launchAddBatch(g.data(), es.data(), cs.data(), count, n, nullptr), cudaSuccess);
  sync();
  std::vector<float> want(count * n);
  for (size_t i = 0; i < want.size(); ++i) want[i] = mat[i] + e[i];
  EXPECT_TRUE(sameBytes(dC.get(), want)) << "add";
  ASSERT_EQ(cuda::launchLowRankResidual(g.data(), readOnly(addresses(dApprox.data(), n)).data(), 3.0f, n, cs.data(),
                                        count, nullptr),
            cudaSuccess);
  sync();
  for (size_t i = 0; i < want.size(); ++i) want[i] = mat[i] - approx[i] / 3.0f;
  EXPECT_TRUE(sameBytes(dC.get(), want)) << "residual";
  ASSERT_EQ(cuda::launchDivide(readOnly(cs).data(), 7.0f, n, cs.data(), count, nullptr), cudaSuccess);
  sync();
  for (float& v : want) v = v / 7.0f;
  EXPECT_TRUE(sameBytes(dC.get(), want)) << "divide in place";
}

}  // namespace
}  // namespace gradcomp
