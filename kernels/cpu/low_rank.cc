#include "kernels/cpu/low_rank.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_path.h"
#include "kernels/cpu/low_rank_avx512.h"
#include "kernels/scalar/low_rank_order.h"

namespace gradcomp::cpu {
namespace {

// Every sum below runs in an order fixed by this source: a long sum in the kLanes interleaved partial sums
// of kernels/scalar/low_rank_order.h (lane l takes elements l, l + kLanes, ...) added pairwise at the end,
// or a plain loop in index order. No reassociation is allowed (no -ffast-math, -ffp-contract=off), so
// whatever vector width the compiler uses, the bits are the same on every x86-64 CPU and build, as the
// codecs' and the models' math, and the CUDA orthogonalization (kernels/cuda/low_rank.cu) matches them.
constexpr size_t kLanes = scalar::kLowRankLanes;

// out[row * outStride] = sum_j a[row * n + j] * b[j] over n for kRows rows of a, each in kLanes interleaved
// partial sums. Several rows per pass give the loop independent add chains (one row's lanes are one
// chain of dependent adds, bound by the adder's latency) and read b once for all of them.
template <size_t kRows>
void dotRows(const float* a, const float* b, size_t n, float* out, size_t outStride) {
  float lane[kRows][kLanes] = {};
  size_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (size_t row = 0; row < kRows; ++row)
      for (size_t l = 0; l < kLanes; ++l) lane[row][l] += a[row * n + j + l] * b[j + l];
  for (size_t row = 0; row < kRows; ++row) {
    for (size_t t = j, l = 0; t < n; ++t, ++l) lane[row][l] += a[row * n + t] * b[t];
    out[row * outStride] = scalar::lowRankLaneSum(lane[row]);
  }
}

float dot(const float* a, const float* b, size_t n) {
  float out = 0.0f;
  dotRows<1>(a, b, n, &out, 0);
  return out;
}

// Column c of a row-major rows x cols matrix, copied contiguous (and back).
void gather(const float* a, size_t rows, size_t cols, size_t c, float* out) {
  for (size_t i = 0; i < rows; ++i) out[i] = a[i * cols + c];
}
void scatter(const float* col, size_t rows, size_t cols, size_t c, float* a) {
  for (size_t i = 0; i < rows; ++i) a[i * cols + c] = col[i];
}

// acc (r x m) += A^T B, A's rows in order (the AVX-512 twin keeps this order, low_rank_avx512.h). Up to four
// rows of A per pass over an accumulator row: each element still takes one product and one add per row,
// in row order, but is loaded and stored once per four rows.
void accumulateTransposedA(const float* a, size_t n, size_t m, const float* b, size_t r, float* acc) {
  for (size_t i = 0; i < n; i += 4) {
    const size_t rows = std::min<size_t>(4, n - i);
    for (size_t k = 0; k < r; ++k) {
      float* out = acc + k * m;
      const float* row = a + i * m;
      if (rows == 4) {
        const float b0 = b[i * r + k], b1 = b[(i + 1) * r + k], b2 = b[(i + 2) * r + k], b3 = b[(i + 3) * r + k];
        for (size_t j = 0; j < m; ++j) {
          float s = out[j];
          s += row[j] * b0;
          s += row[m + j] * b1;
          s += row[2 * m + j] * b2;
          s += row[3 * m + j] * b3;
          out[j] = s;
        }
      } else {
        for (size_t t = 0; t < rows; ++t) {
          const float bk = b[(i + t) * r + k];
          for (size_t j = 0; j < m; ++j) out[j] += row[t * m + j] * bk;
        }
      }
    }
  }
}

}  // namespace

void matmul(const float* a, size_t n, size_t m, const float* b, size_t r, float* c) {
  // C[i][k] = dot(A row i, B column k): B's columns transposed once so both operands are contiguous.
  std::vector<float> bt(r * m);
  for (size_t j = 0; j < m; ++j)
    for (size_t k = 0; k < r; ++k) bt[k * m + j] = b[j * r + k];
#if GRADCOMP_CPU_AVX512_KERNELS
  if (activeCpuPath() == CpuPath::Avx512) return avx512::matmulRowsByColumns(a, n, m, bt.data(), r, c);
#endif
  // Four rows share each pass over a column of B (dotRows).
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (size_t k = 0; k < r; ++k) dotRows<4>(a + i * m, bt.data() + k * m, m, c + i * r + k, r);
  for (; i < n; ++i)
    for (size_t k = 0; k < r; ++k) c[i * r + k] = dot(a + i * m, bt.data() + k * m, m);
}

void matmulTransposedA(const float* a, size_t n, size_t m, const float* b, size_t r, float* c) {
  // C[j][k] = sum over i in order of A[i][j] B[i][k]: A streamed once, row by row, into r accumulator rows
  // of m (the loop over j is independent per j, so it vectorizes without changing any sum's order).
  std::vector<float> acc(r * m, 0.0f);
#if GRADCOMP_CPU_AVX512_KERNELS
  if (activeCpuPath() == CpuPath::Avx512)
    avx512::accumulateTransposedA(a, n, m, b, r, acc.data());
  else
#endif
    accumulateTransposedA(a, n, m, b, r, acc.data());
  for (size_t j = 0; j < m; ++j)
    for (size_t k = 0; k < r; ++k) c[j * r + k] = acc[k * m + j];
}

void matmulTransposedB(const float* a, size_t n, size_t r, const float* b, size_t m, float* c) {
  // C[i][j] = sum over k in order of A[i][k] B[j][k]; B's columns transposed once.
  std::vector<float> bt(r * m);
  for (size_t j = 0; j < m; ++j)
    for (size_t k = 0; k < r; ++k) bt[k * m + j] = b[j * r + k];
#if GRADCOMP_CPU_AVX512_KERNELS
  if (activeCpuPath() == CpuPath::Avx512) return avx512::matmulTransposedBRows(a, n, r, bt.data(), m, c);
#endif
  // Per chunk of a row, the r terms summed in a local array the compiler keeps in registers, and stored
  // once (summing into the output itself stores and reloads every element r times).
  constexpr size_t kChunk = 64;
  for (size_t i = 0; i < n; ++i) {
    float* out = c + i * m;
    const float* ai = a + i * r;
    for (size_t j0 = 0; j0 < m; j0 += kChunk) {
      const size_t len = std::min(kChunk, m - j0);
      float sum[kChunk];
      for (size_t j = 0; j < len; ++j) sum[j] = ai[0] * bt[j0 + j];
      for (size_t k = 1; k < r; ++k) {
        const float* bk = bt.data() + k * m + j0;
        for (size_t j = 0; j < len; ++j) sum[j] += ai[k] * bk[j];
      }
      std::copy(sum, sum + len, out + j0);
    }
  }
}

void orthogonalizeColumns(float* a, size_t rows, size_t cols, float epsilon) {
  std::vector<float> ci(rows), cj(rows);
  for (size_t i = 0; i < cols; ++i) {
    gather(a, rows, cols, i, ci.data());
    const float norm = std::sqrt(dot(ci.data(), ci.data(), rows));
    // torch: without an epsilon a zero column would be 0/0; it fills it with zeros instead.
    if (epsilon == 0.0f && norm == 0.0f) {
      std::fill(ci.begin(), ci.end(), 0.0f);
    } else {
      const float d = norm + epsilon;
      for (float& v : ci) v /= d;
    }
    scatter(ci.data(), rows, cols, i, a);
    for (size_t j = i + 1; j < cols; ++j) {
      gather(a, rows, cols, j, cj.data());
      const float p = dot(ci.data(), cj.data(), rows);
      for (size_t t = 0; t < rows; ++t) cj[t] -= p * ci[t];
      scatter(cj.data(), rows, cols, j, a);
    }
  }
}

}  // namespace gradcomp::cpu
