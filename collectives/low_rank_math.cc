// The host math: kernels/cpu/low_rank.h and plain loops, the reference the device math is checked against.
#include "collectives/low_rank_math.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/low_rank.h"

namespace gradcomp {
namespace {

class HostLowRankMath final : public LowRankMath {
 public:
  Device device() const override { return Device::Cpu; }
  MathBuffer allocate(size_t n) override {
    return {std::shared_ptr<float>(new float[std::max<size_t>(n, 1)](), std::default_delete<float[]>()), n};
  }
  void download(const float* from, size_t n, float* host) override { copy(from, n, host); }
  void upload(const float* host, size_t n, float* to) override { copy(host, n, to); }
  // A batch runs matrix by matrix: the bits of the single calls.
  void add(Batch<const float> g, Batch<const float> e, size_t n, Batch<float> c) override {
    for (size_t k = 0; k < g.size(); ++k) {
      if (e.empty()) {
        copy(g[k], n, c[k]);
        continue;
      }
      for (size_t i = 0; i < n; ++i) c[k][i] = g[k][i] + e[k][i];
    }
  }
  void orthogonalizeColumns(Batch<float> a, size_t rows, size_t cols, float epsilon) override {
    for (float* m : a) cpu::orthogonalizeColumns(m, rows, cols, epsilon);
  }
  void matmul(Batch<const float> a, size_t n, size_t m, Batch<const float> b, size_t r, Batch<float> c) override {
    for (size_t k = 0; k < a.size(); ++k) cpu::matmul(a[k], n, m, b[k], r, c[k]);
  }
  void matmulTransposedA(Batch<const float> a, size_t n, size_t m, Batch<const float> b, size_t r,
                         Batch<float> c) override {
    for (size_t k = 0; k < a.size(); ++k) cpu::matmulTransposedA(a[k], n, m, b[k], r, c[k]);
  }
  void matmulTransposedB(Batch<const float> a, size_t n, size_t r, Batch<const float> b, size_t m,
                         Batch<float> c) override {
    for (size_t k = 0; k < a.size(); ++k) cpu::matmulTransposedB(a[k], n, r, b[k], m, c[k]);
  }
  void residual(Batch<const float> m, Batch<const float> approx, float ranks, size_t n, Batch<float> residual) override {
    for (size_t k = 0; k < m.size(); ++k)
      for (size_t i = 0; i < n; ++i) residual[k][i] = m[k][i] - approx[k][i] / ranks;
  }
  void divide(Batch<const float> x, float d, size_t n, Batch<float> y) override {
    for (size_t k = 0; k < x.size(); ++k)
      for (size_t i = 0; i < n; ++i) y[k][i] = x[k][i] / d;
  }
  void finish() override {}

 private:
  static void copy(const float* from, size_t n, float* to) {
    if (n && from != to) std::memmove(to, from, n * sizeof(float));
  }
};

}  // namespace

std::unique_ptr<LowRankMath> makeHostLowRankMath() { return std::make_unique<HostLowRankMath>(); }

}  // namespace gradcomp
