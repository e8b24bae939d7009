// Top-k exactness and tie rule, threshold's count bound, random-k's shared coordinates, and the
// documented k rules (docs/reliability.md rows 4, 11, 12).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "compressors/registry.h"
#include "core/error.h"
#include "kernels/cpu/topk_select.h"
#include "tests/compressors/codec_test_util.h"

namespace gradcomp {
namespace {

using testing::decodeToVector;
using testing::encodeToVector;
using testing::headerOf;
using testing::normalVector;

// Checks that `d` keeps exactly k entries of x, all of larger magnitude than any dropped one.
void expectExactTopK(const std::vector<float>& x, const std::vector<float>& d, size_t k) {
  size_t kept = 0;
  float minKept = INFINITY, maxDropped = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (d[i] != 0.0f) {
      ASSERT_EQ(d[i], x[i]);
      ++kept;
      minKept = std::min(minKept, std::fabs(x[i]));
    } else {
      maxDropped = std::max(maxDropped, std::fabs(x[i]));
    }
  }
  EXPECT_EQ(kept, k);
  EXPECT_GE(minKept, maxDropped);
}

TEST(TopK, ExactOnNormalAndNarrowRangeData) {
  const size_t n = 200003;
  for (double ratio : {0.001, 0.01, 0.3}) {
    auto c = makeCompressor("topk:ratio=" + std::to_string(ratio));
    const size_t k = static_cast<size_t>(std::llround(ratio * n));
    auto x = normalVector(n, 11);
    expectExactTopK(x, decodeToVector(*c, encodeToVector(*c, x), n), k);
    // Narrow range: every value in [1, 1.0001): the top radix digits are all equal.
    for (size_t i = 0; i < n; ++i) x[i] = 1.0f + std::fabs(x[i]) * 1e-5f;
    expectExactTopK(x, decodeToVector(*c, encodeToVector(*c, x), n), k);
  }
}

TEST(TopK, TiesGoToTheLowerIndex) {
  auto c = makeCompressor("topk:k=3");
  const std::vector<float> x = {1, -2, 2, 0.5f, 2, -2, 1};
  const auto d = decodeToVector(*c, encodeToVector(*c, x), x.size());
  EXPECT_EQ(d, (std::vector<float>{0, -2, 2, 0, 2, 0, 0}));
  // All equal: the first k indices.
  const std::vector<float> same(10, 3.0f);
  const auto wire = encodeToVector(*c, same);
  const auto ds = decodeToVector(*c, wire, same.size());
  EXPECT_EQ(ds, (std::vector<float>{3, 3, 3, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(TopK, RadixSelectAgreesWithSortingOnTies) {
  // Many duplicates straddling the k boundary.
  std::vector<float> x(5000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 13) - 6.0f;
  for (size_t k : {1ul, 10ul, 385ul, 386ul, 2500ul, 5000ul}) {
    const auto t = cpu::radixSelect(x.data(), x.size(), k);
    std::vector<uint64_t> idx(k);
    std::vector<float> val(k);
    ASSERT_EQ(cpu::gatherSelected<uint64_t>(x.data(), x.size(), t, k, idx.data(), val.data()), k);
    // Reference: stable sort by decreasing magnitude, first k, then sort indices.
    std::vector<uint64_t> order(x.size());
    for (size_t i = 0; i < x.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
    order.resize(k);
    std::sort(order.begin(), order.end());
    EXPECT_EQ(idx, order) << "k=" << k;
  }
}

TEST(TopK, SampledPathEqualsRadixPathOrFallsBack) {
  const size_t n = 300007;
  std::vector<std::pair<std::string, std::vector<float>>> inputs;
  inputs.emplace_back("normal", normalVector(n, 31));
  auto narrow = normalVector(n, 32);
  for (auto& v : narrow) v = 1.0f + std::fabs(v) * 1e-6f;
  inputs.emplace_back("narrow", narrow);
  std::vector<float> ties(n);
  for (size_t i = 0; i < n; ++i) ties[i] = static_cast<float>(i % 5);
  inputs.emplace_back("ties", ties);
  auto sorted = normalVector(n, 33);  // large values clustered at the end: the stride sample sees few
  std::sort(sorted.begin(), sorted.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); });
  inputs.emplace_back("sorted", sorted);
  int done = 0;
  for (const auto& [name, x] : inputs) {
    for (size_t k : {1ul, 37ul, 100ul, 3000ul, 30000ul}) {
      std::vector<uint64_t> a(k), b(k);
      std::vector<float> va(k), vb(k);
      const auto r = cpu::sampledTopK(x.data(), n, k, a.data(), va.data());
      if (r != cpu::SampledTopK::Done) continue;
      ++done;
      const auto t = cpu::radixSelect(x.data(), n, k);
      ASSERT_EQ(cpu::gatherSelected<uint64_t>(x.data(), n, t, k, b.data(), vb.data()), k);
      EXPECT_EQ(a, b) << name << " k=" << k;
      EXPECT_EQ(va, vb) << name << " k=" << k;
    }
  }
  EXPECT_GE(done, 8);  // the fast path is actually taken on ordinary data
  std::vector<float> bad = normalVector(n, 34);
  bad[n - 2] = NAN;
  std::vector<uint64_t> idx(100);
  std::vector<float> val(100);
  EXPECT_EQ(cpu::sampledTopK(bad.data(), n, 100, idx.data(), val.data()), cpu::SampledTopK::NonFinite);
}

TEST(TopK, BudgetRulesAreTheDocumentedOnes) {
  const auto x = normalVector(100, 12);
  EXPECT_EQ(headerOf(encodeToVector(*makeCompressor("topk:k=500"), x)).count, 100u);       // k > n: clamped
  EXPECT_EQ(headerOf(encodeToVector(*makeCompressor("topk:ratio=0.001"), x)).count, 1u);   // rounds to 0: 1
  EXPECT_EQ(headerOf(encodeToVector(*makeCompressor("topk:ratio=0.014"), x)).count, 1u);
  EXPECT_EQ(headerOf(encodeToVector(*makeCompressor("topk:ratio=0.015"), x)).count, 2u);
  EXPECT_THROW(makeCompressor("topk:k=0"), InvalidArgument);
  EncodeContext ctx;
  ctx.kOverride = 30;
  auto c = makeCompressor("topk:k=5");
  EXPECT_EQ(headerOf(encodeToVector(*c, x, ctx)).count, 30u);
  EXPECT_EQ(c->maxEncodedBytes(100, ctx), encodeToVector(*c, x, ctx).size());
}

TEST(TopK, IndexWidthIsChosenByElementCount) {
  // n > 2^32 - 1 needs 64-bit indices; check the layout arithmetic without allocating the tensor.
  auto c = makeCompressor("topk:k=10");
  const size_t big = (size_t{1} << 32) + 5;
  EXPECT_EQ(c->maxEncodedBytes(big), kWireHeaderBytes + 80 + 48);  // 10 x u64 -> 80, 10 x f32 -> 48 (padded)
  EXPECT_EQ(c->maxEncodedBytes(1000), kWireHeaderBytes + 48 + 48);  // 10 x u32 -> 48 padded
}

TEST(Threshold, CountIsWithinTenPercentOfK) {
  for (double ratio : {0.001, 0.01, 0.05}) {
    auto c = makeCompressor("threshold:ratio=" + std::to_string(ratio));
    for (uint32_t seed = 0; seed < 5; ++seed) {
      const size_t n = 1 << 22;
      const auto x = normalVector(n, 100 + seed);
      EncodeContext ctx;
      ctx.step = seed;
      const auto wire = encodeToVector(*c, x, ctx);
      const double k = ratio * n, got = static_cast<double>(headerOf(wire).count);
      EXPECT_NEAR(got, k, 0.1 * k) << "ratio " << ratio << " seed " << seed;
      // Everything sent is at least as large as everything not sent.
      const auto d = decodeToVector(*c, wire, n);
      float minSent = INFINITY, maxUnsent = 0;
      for (size_t i = 0; i < n; ++i) {
        if (d[i] != 0.0f)
          minSent = std::min(minSent, std::fabs(x[i]));
        else
          maxUnsent = std::max(maxUnsent, std::fabs(x[i]));
      }
      EXPECT_GE(minSent, maxUnsent);
    }
  }
}

TEST(Threshold, FallsBackToExactTopKWhenTheEstimateOvershoots) {
  // Half the values are equal: a sampled threshold lands on them and would send far more than 2k+64.
  std::vector<float> x(100000, 1.0f);
  for (size_t i = 0; i < x.size(); i += 2) x[i] = 0.5f;
  auto c = makeCompressor("threshold:k=100");
  const size_t cap = c->maxEncodedBytes(x.size());
  testing::WireBuffer buf(cap);
  const EncodeResult r = c->encode(x, buf.span(cap), {});
  EXPECT_TRUE(r.exactFallback);
  EXPECT_EQ(r.entries, 100u);
}

TEST(RandomK, SameCoordinatesOnEveryRankDistinctAndSummable) {
  auto c = makeCompressor("randomk:k=1000");
  const size_t n = 50000;
  EncodeContext r0, r1;
  r0.seed = r1.seed = 5;
  r1.rank = 1;
  const auto x0 = normalVector(n, 1), x1 = normalVector(n, 2);
  const auto w0 = encodeToVector(*c, x0, r0), w1 = encodeToVector(*c, x1, r1);
  const auto d0 = decodeToVector(*c, w0, n), d1 = decodeToVector(*c, w1, n);
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(d0[i] != 0.0f, d1[i] != 0.0f) << i;
    count += d0[i] != 0.0f;
    if (d0[i] != 0.0f) {
      EXPECT_EQ(d0[i], x0[i]);
      EXPECT_EQ(d1[i], x1[i]);
    }
  }
  EXPECT_EQ(count, 1000u);
  // Only values travel: header + 16-byte key + 1000 fp32.
  EXPECT_EQ(w0.size(), kWireHeaderBytes + 16 + 4000);
}

}  // namespace
}  // namespace gradcomp
