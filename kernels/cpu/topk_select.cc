#include "kernels/cpu/topk_select.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/cpu/prefetch.h"
#include "kernels/scalar/host_device.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include <cmath>

namespace gradcomp::cpu {

using scalar::absBits;

namespace {

// Digits of the 31 magnitude bits, most significant first: 11 + 11 + 9 bits.
constexpr int kDigitShift[3] = {20, 9, 0};
constexpr int kDigitBits[3] = {11, 11, 9};

}  // namespace

SelectionThreshold radixSelect(const float* x, size_t n, size_t k) {
  uint32_t prefix = 0, prefixMask = 0;  // bits fixed by earlier digits
  size_t remaining = k;                 // how many still to take from elements matching the prefix
  // Gathering the boundary bucket and finishing with nth_element beats another full histogram pass
  // once the bucket is this small.
  const size_t gatherLimit = std::max<size_t>(1u << 16, n / 32);
  std::vector<uint64_t> hist;  // 64-bit counts: n may exceed 2^32
  for (int level = 0; level < 3; ++level) {
    const int shift = kDigitShift[level];
    const uint32_t bins = 1u << kDigitBits[level];
    hist.assign(bins, 0);
    if (prefixMask == 0) {
      for (size_t i = 0; i < n; ++i) ++hist[absBits(x[i]) >> shift];
    } else {
      for (size_t i = 0; i < n; ++i) {
        const uint32_t a = absBits(x[i]);
        if ((a & prefixMask) == prefix) ++hist[(a >> shift) & (bins - 1)];
      }
    }
    // Inf and NaN land in the top bins of the first digit: the check costs nothing extra.
    if (level == 0 && std::any_of(hist.begin() + (0x7f800000u >> shift), hist.end(), [](uint64_t c) { return c != 0; })) {
      SelectionThreshold bad;
      bad.nonFinite = true;
      return bad;
    }
    // Walk bins from the largest magnitudes down to the one holding the k-th largest.
    uint32_t d = bins - 1;
    for (;; --d) {
      if (hist[d] >= remaining) break;
      remaining -= hist[d];
    }
    prefix |= d << shift;
    prefixMask |= (bins - 1) << shift;
    if (level == 2) return SelectionThreshold{prefix, remaining};  // all 31 bits fixed
    if (hist[d] <= gatherLimit) {
      std::vector<uint32_t> cand;
      cand.reserve(hist[d]);
      for (size_t i = 0; i < n; ++i) {
        const uint32_t a = absBits(x[i]);
        if ((a & prefixMask) == prefix) cand.push_back(a);
      }
      std::nth_element(cand.begin(), cand.begin() + static_cast<ptrdiff_t>(remaining - 1), cand.end(),
                       std::greater<uint32_t>());
      const uint32_t t = cand[remaining - 1];
      const size_t above = static_cast<size_t>(std::count_if(cand.begin(), cand.end(), [t](uint32_t a) { return a > t; }));
      return SelectionThreshold{t, remaining - above};
    }
  }
  return SelectionThreshold{prefix, remaining};
}

template <typename Index>
size_t gatherSelected(const float* x, size_t n, SelectionThreshold t, size_t cap, Index* indices, float* values) {
  size_t out = 0;
  uint64_t equalLeft = t.takeEqual;
  constexpr size_t kChunk = 16;
  size_t i = 0;
  for (; i < n && out < cap; i += kChunk) {
    const size_t end = std::min(n, i + kChunk);
    uint32_t m = 0;
    for (size_t j = i; j < end; ++j) m = std::max(m, absBits(x[j]));
    if (m < t.bits) continue;  // the common case at small k: skip 16 elements with one compare
    for (size_t j = i; j < end && out < cap; ++j) {
      const uint32_t a = absBits(x[j]);
      const bool take = a > t.bits || (a == t.bits && equalLeft > 0);
      if (!take) continue;
      if (a == t.bits && equalLeft != UINT64_MAX) --equalLeft;
      indices[out] = static_cast<Index>(j);
      values[out] = x[j];
      ++out;
    }
  }
  return out;
}

template size_t gatherSelected<uint32_t>(const float*, size_t, SelectionThreshold, size_t, uint32_t*, float*);
template size_t gatherSelected<uint64_t>(const float*, size_t, SelectionThreshold, size_t, uint64_t*, float*);

size_t gatherAtLeast(const float* x, size_t n, uint32_t minBits, size_t cap, uint64_t* indices, float* values) {
  size_t count = 0, i = 0;
#if defined(__AVX2__)
  // |x| bits < 2^31, so a signed compare against minBits - 1 is exact (minBits = 0 admits all).
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff);
  const __m256i below = _mm256_set1_epi32(static_cast<int32_t>(minBits) - 1);
  auto hits = [&](size_t at) {
    const __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + at)), absMask);
    return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, below))));
  };
  // 64 elements per test: at the densities top-k uses (~1 %) about half the groups have no hit.
  for (; i + 64 <= n; i += 64) {
    // The input 4 KiB ahead: one pass over the tensor whose per-group work is a few instructions, and
    // where memory is slow (the Xeon of 2026-12-04) the hardware prefetchers alone left it at about one
    // memcpy's time.
    prefetchFloats(x, i + 1024, i + 1088, PrefetchInto::L1);
    uint64_t m = uint64_t{hits(i) | hits(i + 8) << 8 | hits(i + 16) << 16 | hits(i + 24) << 24} |
                 uint64_t{hits(i + 32) | hits(i + 40) << 8 | hits(i + 48) << 16 | hits(i + 56) << 24} << 32;
    while (m) {
      const size_t j = i + static_cast<size_t>(__builtin_ctzll(m));
      if (count == cap) return cap + 1;
      indices[count] = j;
      values[count] = x[j];
      ++count;
      m &= m - 1;
    }
  }
#endif
  for (; i < n; ++i) {
    if (absBits(x[i]) < minBits) continue;
    if (count == cap) return cap + 1;
    indices[count] = i;
    values[count] = x[i];
    ++count;
  }
  return count;
}

SampledTopK sampledTopK(const float* x, size_t n, size_t k, uint64_t* indices, float* values) {
  // Up to 512 sampled hits fix the bound to a few percent (fewer for small k, where the margin term
  // dominates); below 2^16 elements, or when k is a large fraction of n, sampling saves nothing.
  if (n < (1u << 16) || k < 32 || k > n / 8) return SampledTopK::Fallback;
  const double fraction = static_cast<double>(k) / static_cast<double>(n);
  // A stride of >= 64 floats keeps the sample to one cache line in four: a fraction of a full read.
  const size_t sampledHits = std::clamp<size_t>(k / 64, 4, 512);
  const size_t stride = k / sampledHits;  // n / (hits / fraction)
  std::vector<float> sample;
  sample.reserve(n / stride + 1);
  for (size_t i = stride / 2; i < n; i += stride) {
    __builtin_prefetch(x + i + 16 * stride);  // strided: the hardware prefetcher does not follow
    if (scalar::isFiniteBits(absBits(x[i]))) sample.push_back(x[i]);
  }
  // Take the sample rank that admits ~1.15k elements plus four standard deviations of margin.
  const double hits = fraction * static_cast<double>(sample.size());
  const size_t rank = std::min(sample.size(), static_cast<size_t>(std::ceil(1.15 * hits + 4 * std::sqrt(hits) + 4)));
  if (rank == 0) return SampledTopK::Fallback;
  const uint32_t bound = radixSelect(sample.data(), sample.size(), rank).bits;

  const size_t cap = 3 * k + 4096;
  // Per-thread scratch, reused across calls: fresh megabytes every call cost page faults.
  thread_local std::vector<uint64_t> candIdx;
  thread_local std::vector<float> candVal;
  if (candIdx.size() < cap) {
    candIdx.resize(cap);
    candVal.resize(cap);
  }
  // (A branch-free compaction through a permutation table was tried here: bimodal, 10 to 18 ms
  // between processes, likely 4 KiB aliasing between the loads and the packed stores.)
  const size_t got = gatherAtLeast(x, n, bound, cap, candIdx.data(), candVal.data());
  if (got > cap || got < k) return SampledTopK::Fallback;
  for (size_t i = 0; i < got; ++i)
    if (!scalar::isFiniteBits(absBits(candVal[i]))) return SampledTopK::NonFinite;
  // Every non-candidate is below the bound, hence below the k-th largest: select among candidates.
  // Their |x| bits all lie in [bound, maxBits], so one fine histogram of (bits - bound) >> shift finds
  // the bin holding the k-th largest, and only that bin is sorted out exactly.
  uint32_t maxBits = bound;
  for (size_t i = 0; i < got; ++i) maxBits = std::max(maxBits, absBits(candVal[i]));
  constexpr uint32_t kBins = 1u << 16;
  int shift = 0;
  while (((maxBits - bound) >> shift) >= kBins) ++shift;
  thread_local std::vector<uint32_t> hist;
  hist.assign(kBins, 0);
  for (size_t i = 0; i < got; ++i) ++hist[(absBits(candVal[i]) - bound) >> shift];
  size_t remaining = k;
  uint32_t bin = ((maxBits - bound) >> shift) + 1;
  do {
    --bin;
    if (hist[bin] >= remaining) break;
    remaining -= hist[bin];
  } while (bin > 0);
  std::vector<uint32_t> boundary;
  boundary.reserve(hist[bin]);
  for (size_t i = 0; i < got; ++i)
    if (((absBits(candVal[i]) - bound) >> shift) == bin) boundary.push_back(absBits(candVal[i]));
  std::nth_element(boundary.begin(), boundary.begin() + static_cast<ptrdiff_t>(remaining - 1), boundary.end(),
                   std::greater<uint32_t>());
  const uint32_t threshold = boundary[remaining - 1];
  uint64_t equalLeft =
      remaining - static_cast<size_t>(std::count_if(boundary.begin(), boundary.end(), [&](uint32_t a) { return a > threshold; }));
  // Candidates are in index order, so ties still go to the lower index.
  size_t out = 0;
  for (size_t i = 0; i < got && out < k; ++i) {
    const uint32_t a = absBits(candVal[i]);
    if (a < threshold || (a == threshold && equalLeft == 0)) continue;
    if (a == threshold) --equalLeft;
    indices[out] = candIdx[i];
    values[out] = candVal[i];
    ++out;
  }
  return out == k ? SampledTopK::Done : SampledTopK::Fallback;
}

uint32_t sampledThreshold(const float* x, size_t n, size_t k, size_t minSample, uint64_t offset) {
  constexpr double kSampledHits = 2048;
  const double fraction = static_cast<double>(k) / static_cast<double>(n);
  const size_t want = std::max<size_t>(minSample, static_cast<size_t>(kSampledHits / fraction));
  const size_t stride = std::max<size_t>(1, n / std::max<size_t>(1, want));
  std::vector<float> sample;
  sample.reserve(n / stride + 1);
  for (size_t i = offset % stride; i < n; i += stride)
    if (scalar::isFiniteBits(absBits(x[i]))) sample.push_back(x[i]);
  if (sample.empty()) return 0;
  // Keep the same fraction of the sample as k is of n (at least one).
  size_t ks = static_cast<size_t>(fraction * static_cast<double>(sample.size()) + 0.5);
  ks = std::clamp<size_t>(ks, 1, sample.size());
  return radixSelect(sample.data(), sample.size(), ks).bits;
}

}  // namespace gradcomp::cpu
