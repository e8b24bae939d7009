#include "training/reproducible_math.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gradcomp::repro {

void gemm(Eigen::Index m, Eigen::Index n, Eigen::Index k, const float* a, Eigen::Index lda, const float* b,
          Eigen::Index ldb, float* c, Eigen::Index ldc) {
  // c(:, j) accumulates a(:, p) * b(p, j) for p = 0, 1, ...: every c(i, j) is the same chain of rounded
  // products and sums whatever the vector width; the compiler vectorizes the loop over i only (it may
  // not reorder a float sum without -ffast-math).
  for (Eigen::Index j = 0; j < n; ++j) {
    float* cj = c + j * ldc;
    std::fill(cj, cj + m, 0.0f);
    for (Eigen::Index p = 0; p < k; ++p) {
      const float bpj = b[p + j * ldb];
      const float* ap = a + p * lda;
      for (Eigen::Index i = 0; i < m; ++i) cj[i] += ap[i] * bpj;
    }
  }
}

Vector columnSums(const Matrix& m) {
  Vector s = Vector::Zero(m.cols());
  for (Eigen::Index j = 0; j < m.cols(); ++j) {
    float acc = 0.0f;
    for (Eigen::Index i = 0; i < m.rows(); ++i) acc += m(i, j);
    s(j) = acc;
  }
  return s;
}

Vector rowSums(const Matrix& m) {
  Vector s = Vector::Zero(m.rows());
  for (Eigen::Index j = 0; j < m.cols(); ++j)
    for (Eigen::Index i = 0; i < m.rows(); ++i) s(i) += m(i, j);  // row i sums its columns in order
  return s;
}

double squaredNorm(const Matrix& m) {
  double s = 0;
  for (Eigen::Index i = 0; i < m.size(); ++i) s += static_cast<double>(m.data()[i]) * m.data()[i];
  return s;
}

Eigen::Index argmaxOfRow(const Matrix& m, Eigen::Index r) {
  Eigen::Index best = 0;
  for (Eigen::Index j = 1; j < m.cols(); ++j)
    if (m(r, j) > m(r, best)) best = j;
  return best;
}

namespace {

constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2 split so that k * kLn2Hi is exact for |k| < 2^11
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kInvLn2 = 1.44269504088896338700e+00;
constexpr double kTwoPi = 6.28318530717958647693;

// Horner evaluation of sum c[i] x^i.
template <size_t N>
double horner(const double (&c)[N], double x) {
  double p = c[N - 1];
  for (size_t i = N - 1; i-- > 0;) p = p * x + c[i];
  return p;
}

// Taylor coefficients 1/i! and the odd / even ones of sin and cos, to the degree that bounds the
// truncation error by 1e-18 on the reduced ranges below.
constexpr double kExp[] = {1.0,
                           1.0,
                           1.0 / 2,
                           1.0 / 6,
                           1.0 / 24,
                           1.0 / 120,
                           1.0 / 720,
                           1.0 / 5040,
                           1.0 / 40320,
                           1.0 / 362880,
                           1.0 / 3628800,
                           1.0 / 39916800,
                           1.0 / 479001600,
                           1.0 / 6227020800.0,
                           1.0 / 87178291200.0};
// cos x = sum (-1)^i x^2i / (2i)!, in t = x^2.
constexpr double kCos[] = {1.0,
                           -1.0 / 2,
                           1.0 / 24,
                           -1.0 / 720,
                           1.0 / 40320,
                           -1.0 / 3628800,
                           1.0 / 479001600,
                           -1.0 / 87178291200.0,
                           1.0 / 20922789888000.0,
                           -1.0 / 6402373705728000.0};
// sin x / x = sum (-1)^i x^2i / (2i+1)!, in t = x^2.
constexpr double kSin[] = {1.0,
                           -1.0 / 6,
                           1.0 / 120,
                           -1.0 / 5040,
                           1.0 / 362880,
                           -1.0 / 39916800,
                           1.0 / 6227020800.0,
                           -1.0 / 1307674368000.0,
                           1.0 / 355687428096000.0,
                           -1.0 / 121645100408832000.0};

}  // namespace

double exp(double x) {
  if (std::isnan(x)) return x;
  if (x < -745.2) return 0.0;
  if (x > 709.78) return std::numeric_limits<double>::infinity();
  // x = k ln2 + r with |r| <= ln2 / 2 (Cody-Waite: the two-part ln 2 keeps r exact to ~1e-19), then
  // e^x = 2^k e^r with e^r from its Taylor series (truncation below 0.35^15 / 15! ~ 1e-19).
  const double k = std::nearbyint(x * kInvLn2);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  return std::ldexp(horner(kExp, r), static_cast<int>(k));
}

double log(double x) {
  if (!(x > 0.0)) return x == 0.0 ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(x)) return x;
  // x = 2^e m with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716,
  // summed to s^25 (truncation ~ 0.1716^27 / 27 ~ 1e-22).
  int e = 0;
  double m = std::frexp(x, &e);  // m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    e -= 1;
  }
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double t = 1.0 / 25;
  for (int n = 23; n >= 1; n -= 2) t = t * s2 + 1.0 / n;
  const double de = static_cast<double>(e);
  return de * kLn2Hi + (de * kLn2Lo + 2.0 * s * t);
}

double cos2pi(double u) {
  // Reduce to a = |u - round(u)| in [0, 1/2], then to an angle of at most pi/4 through the symmetries of
  // cos around 1/4 and 1/2 turns.
  const double a = std::fabs(u - std::nearbyint(u));
  if (a <= 0.125) {
    const double x = a * kTwoPi;
    return horner(kCos, x * x);
  }
  if (a <= 0.375) {  // cos(2 pi a) = sin(2 pi (1/4 - a))
    const double x = (0.25 - a) * kTwoPi;
    return x * horner(kSin, x * x);
  }
  const double x = (0.5 - a) * kTwoPi;  // cos(2 pi a) = -cos(2 pi (1/2 - a))
  return -horner(kCos, x * x);
}

double powInt(double base, uint64_t n) {
  double result = 1.0, b = base;
  while (n) {
    if (n & 1) result *= b;
    b *= b;
    n >>= 1;
  }
  return result;
}

}  // namespace gradcomp::repro
