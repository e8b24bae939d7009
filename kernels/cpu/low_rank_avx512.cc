// PowerSGD's products on AVX-512, in exactly low_rank.cc's order and with the same grouping of rows (four
// per pass: independent add chains, accumulators kept in registers across rows). low_rank.cc's loops are
// vectorized by the compiler for the build's ISA; these run AVX-512 wherever the CPU has it, including
// in a build for plain x86-64 (the Python package's default, `pip install .`), where those loops get SSE.
// The target attribute (not a file-wide flag) keeps the build runnable on CPUs without AVX-512.
#include "kernels/cpu/low_rank_avx512.h"

#include "kernels/cpu/avx512_intrinsics.h"
#include "kernels/scalar/low_rank_order.h"

#include <type_traits>

#if GRADCOMP_CPU_AVX512_KERNELS
namespace gradcomp::cpu::avx512 {
namespace {

static_assert(scalar::kLowRankLanes == 8, "one 8-lane register holds a dot product's partial sums");

// step(j, lanes, whole) over [0, m) in 16-float vectors: plain loads and stores for the whole ones (a
// masked store with a run-time mask on every vector is several times slower on some cores), masked ones
// for the tail.
template <typename Step>
GRADCOMP_AVX512 inline void overVectors(size_t m, Step&& step) {
  size_t j = 0;
  for (; j + 16 <= m; j += 16) step(j, static_cast<__mmask16>(0xffff), std::true_type{});
  if (j < m) step(j, static_cast<__mmask16>((1u << (m - j)) - 1u), std::false_type{});
}

template <bool kWhole>
GRADCOMP_AVX512 inline __m512 load16(const float* p, __mmask16 lanes) {
  if constexpr (kWhole) return _mm512_loadu_ps(p);
  return _mm512_maskz_loadu_ps(lanes, p);
}

template <bool kWhole>
GRADCOMP_AVX512 inline void store16(float* p, __mmask16 lanes, __m512 v) {
  if constexpr (kWhole)
    _mm512_storeu_ps(p, v);
  else
    _mm512_mask_storeu_ps(p, lanes, v);
}

// kRows dot products of rows a[0..kRows) (row stride m) with b, each in low_rank.cc's order: lane l sums
// the terms l, l + 8, ... (whole groups of 8 in registers, then the tail term by term into lanes 0, 1, ...),
// then the lanes pairwise.
template <int kRows>
GRADCOMP_AVX512 inline void dotRows(const float* a, size_t m, const float* b, float* out, size_t outStride) {
  __m256 acc[kRows];
  for (int row = 0; row < kRows; ++row) acc[row] = _mm256_setzero_ps();
  size_t j = 0;
  for (; j + 8 <= m; j += 8) {
    const __m256 bv = _mm256_loadu_ps(b + j);
    for (int row = 0; row < kRows; ++row)
      acc[row] = _mm256_add_ps(acc[row], _mm256_mul_ps(_mm256_loadu_ps(a + row * m + j), bv));
  }
  for (int row = 0; row < kRows; ++row) {
    alignas(32) float lane[8];
    _mm256_store_ps(lane, acc[row]);
    for (size_t t = j, l = 0; t < m; ++t, ++l) lane[l] += a[row * m + t] * b[t];
    out[row * outStride] = scalar::lowRankLaneSum(lane);
  }
}

}  // namespace

GRADCOMP_AVX512 void matmulRowsByColumns(const float* a, size_t n, size_t m, const float* bt, size_t r, float* c) {
  // Four rows share each pass over a column of B: four independent add chains where one row had one.
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (size_t k = 0; k < r; ++k) dotRows<4>(a + i * m, m, bt + k * m, c + i * r + k, r);
  for (; i < n; ++i)
    for (size_t k = 0; k < r; ++k) dotRows<1>(a + i * m, m, bt + k * m, c + i * r + k, r);
}

GRADCOMP_AVX512 void accumulateTransposedA(const float* a, size_t n, size_t m, const float* b, size_t r, float* acc) {
  // Up to four rows of A per pass over an accumulator row: each element's sum still runs over A's rows in
  // order (one product and one add per row), but it is loaded and stored once per four rows.
  for (size_t i = 0; i < n; i += 4) {
    const size_t rows = n - i < 4 ? n - i : 4;
    for (size_t k = 0; k < r; ++k) {
      __m512 coef[4];
      for (size_t t = 0; t < rows; ++t) coef[t] = _mm512_set1_ps(b[(i + t) * r + k]);
      float* out = acc + k * m;
      overVectors(m, [&](size_t j, __mmask16 lanes, auto whole) GRADCOMP_AVX512_LAMBDA {
        constexpr bool kWhole = decltype(whole)::value;
        __m512 s = load16<kWhole>(out + j, lanes);
        for (size_t t = 0; t < rows; ++t)
          s = _mm512_add_ps(s, _mm512_mul_ps(load16<kWhole>(a + (i + t) * m + j, lanes), coef[t]));
        store16<kWhole>(out + j, lanes, s);
      });
    }
  }
}

GRADCOMP_AVX512 void matmulTransposedBRows(const float* a, size_t n, size_t r, const float* bt, size_t m, float* c) {
  // Each output element's r terms in registers, stored once (low_rank.cc stores and reloads it per term).
  for (size_t i = 0; i < n; ++i) {
    const float* ai = a + i * r;
    float* out = c + i * m;
    overVectors(m, [&](size_t j, __mmask16 lanes, auto whole) GRADCOMP_AVX512_LAMBDA {
      constexpr bool kWhole = decltype(whole)::value;
      __m512 s = _mm512_mul_ps(_mm512_set1_ps(ai[0]), load16<kWhole>(bt + j, lanes));
      for (size_t k = 1; k < r; ++k)
        s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_set1_ps(ai[k]), load16<kWhole>(bt + k * m + j, lanes)));
      store16<kWhole>(out + j, lanes, s);
    });
  }
}

}  // namespace gradcomp::cpu::avx512
#endif
