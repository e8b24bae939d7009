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
  void add(const float* g, const float* e, size_t n, float* c) override {
    if (!e) return copy(g, n, c);
    for (size_t i = 0; i < n; ++i) c[i] = g[i] + e[i];
  }
  void orthogonalizeColumns(float* a, size_t rows, size_t cols, float epsilon) override {
    cpu::orthogonalizeColumns(a, rows, cols, epsilon);
  }
  void matmul(const float* a, size_t n, size_t m, const float* b, size_t r, float* c) override {
    cpu::matmul(a, n, m, b, r, c);
  }
  void matmulTransposedA(const float* a, size_t n, size_t m, const float* b, size_t r, float* c) override {
    cpu::matmulTransposedA(a, n, m, b, r, c);
  }
  void matmulTransposedB(const float* a, size_t n, size_t r, const float* b, size_t m, float* c) override {
    cpu::matmulTransposedB(a, n, r, b, m, c);
  }
  void residual(const float* m, const float* approx, float ranks, size_t n, float* residual) override {
    for (size_t i = 0; i < n; ++i) residual[i] = m[i] - approx[i] / ranks;
  }
  void divide(const float* x, float d, size_t n, float* y) override {
    for (size_t i = 0; i < n; ++i) y[i] = x[i] / d;
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
