// CUDA twins of the sparse selections; see sparse_kernels.cuh.
//
// Radix select: the key of element i is the bit pattern of |x[i]| (monotone in |x| for finite x; bit 31
// is always 0). Three digits, 11 + 11 + 9 bits from the top. For each digit a histogram of the keys
// that match the digits chosen so far, then one block scans it from the largest digit down to find
// the bucket holding the k-th largest key. State (chosen prefix, how many are still to take) stays in
// device memory between the launches. After the last digit the prefix is the threshold key t, and
// "still to take" is how many of the keys equal to t are taken: the first ones in index order.
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/sparse_kernels.cuh"
#include "kernels/scalar/float_formats.h"
#include "kernels/scalar/radix_digits.h"
#include "kernels/scalar/scale_limits.h"

namespace gradcomp::cuda {
namespace {

using detail::kThreads;

#define GC_TRY(call)                           \
  do {                                         \
    const cudaError_t gcTry_ = (call);         \
    if (gcTry_ != cudaSuccess) return gcTry_;  \
  } while (0)

// Stream-ordered device scratch, released when it goes out of scope.
template <typename T>
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (p_) cudaFreeAsync(p_, stream_);
  }
  cudaError_t allocate(size_t count, cudaStream_t stream) {
    stream_ = stream;
    return cudaMallocAsync(reinterpret_cast<void**>(&p_), std::max<size_t>(count, 1) * sizeof(T), stream);
  }
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

constexpr int kBins = scalar::kRadixBins;
constexpr int kChooseThreads = kBins / 2;
// Histograms use a fixed grid (about 8 resident blocks per SM on a 132-SM part): each block merges its
// shared-memory bins into the global ones once, so fewer, longer-lived blocks mean fewer global atomics.
constexpr unsigned kHistogramBlocks = 1024;


struct SelectState {
  uint32_t prefix;
  uint32_t failed;  // set when no bucket held the k-th key (cannot happen with consistent counts)
  unsigned long long kRemaining;
  unsigned int hist[kBins];
};

struct AbsKeys {
  const float* x;
  __device__ uint32_t operator()(size_t i) const { return scalar::absBits(x[i]); }
};
struct ListedAbsKeys {
  const float* x;
  const uint64_t* list;
  __device__ uint32_t operator()(size_t j) const { return scalar::absBits(x[list[j]]); }
};
struct PlainKeys {
  const uint32_t* keys;
  __device__ uint32_t operator()(size_t j) const { return keys[j]; }
};

__global__ void initStateKernel(SelectState* st, unsigned long long k) {
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) st->hist[b] = 0;
  if (threadIdx.x == 0) {
    st->prefix = 0;
    st->failed = 0;
    st->kRemaining = k;
  }
}

// Histogram of digit `pass` over the keys matching the prefix's higher digits. With firstNonFinite,
// also records the first index whose key is NaN/Inf (pass 0 over the whole input).
template <typename Keys>
__global__ void histogramKernel(Keys key, size_t m, int pass, SelectState* st, unsigned long long* firstNonFinite) {
  __shared__ unsigned int bins[kBins];
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) bins[b] = 0;
  __syncthreads();
  const uint32_t prefix = st->prefix;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m; i += stride) {
    const uint32_t k = key(i);
    if (firstNonFinite && !scalar::isFiniteBits(k)) detail::recordFirst(firstNonFinite, i);
    if (scalar::radixMatches(k, prefix, pass)) atomicAdd(&bins[scalar::radixDigit(k, pass)], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += blockDim.x)
    if (bins[b]) atomicAdd(&st->hist[b], bins[b]);
}

// One block of 1024 threads: suffix sums of the histogram (largest digit first) find the bucket of the
// k-th largest key; the prefix gains that digit, kRemaining drops by the count above it. Clears the
// histogram for the next pass.
__global__ void chooseKernel(int pass, SelectState* st) {
  using Scan = cub::BlockScan<unsigned long long, kChooseThreads>;
  __shared__ typename Scan::TempStorage temp;
  const int t = threadIdx.x;
  const int d0 = kBins - 1 - 2 * t, d1 = d0 - 1;  // thread 0 holds the two largest digits
  const unsigned long long a0 = st->hist[d0], a1 = st->hist[d1];
  const unsigned long long k = st->kRemaining;
  unsigned long long inclusive;
  Scan(temp).InclusiveSum(a0 + a1, inclusive);
  const unsigned long long before = inclusive - a0 - a1;
  __syncthreads();  // every thread has read kRemaining before one writes it
  bool found = false;
  if (scalar::radixDigitHoldsK(before, a0, k)) {
    st->prefix |= static_cast<uint32_t>(d0) << scalar::radixShift(pass);
    st->kRemaining = k - before;
    found = true;
  } else if (scalar::radixDigitHoldsK(before + a0, a1, k)) {
    st->prefix |= static_cast<uint32_t>(d1) << scalar::radixShift(pass);
    st->kRemaining = k - before - a0;
    found = true;
  }
  if (!__syncthreads_or(found) && t == 0) st->failed = 1;
  st->hist[d0] = 0;
  st->hist[d1] = 0;
}

template <typename Keys>
cudaError_t selectPass(Keys keys, size_t m, int pass, SelectState* st, unsigned long long* firstNonFinite,
                       cudaStream_t stream) {
  const unsigned grid = std::min(kHistogramBlocks, detail::gridFor(m));
  histogramKernel<<<grid, kThreads, 0, stream>>>(keys, m, pass, st, firstNonFinite);
  GC_TRY(cudaGetLastError());
  chooseKernel<<<1, kChooseThreads, 0, stream>>>(pass, st);
  return cudaGetLastError();
}

// Ordered compaction: the indices i < n with pred(i), ascending (CUB's single-pass select).
template <typename Pred>
cudaError_t selectIndices(size_t n, Pred pred, uint64_t* out, int64_t* count, cudaStream_t stream) {
  size_t bytes = 0;
  thrust::counting_iterator<uint64_t> first(0);
  GC_TRY(cub::DeviceSelect::If(nullptr, bytes, first, out, count, static_cast<int64_t>(n), pred, stream));
  Scratch<unsigned char> temp;
  GC_TRY(temp.allocate(bytes, stream));
  return cub::DeviceSelect::If(temp.get(), bytes, first, out, count, static_cast<int64_t>(n), pred, stream);
}

struct AtOrAboveTopBucket {  // key's top digit >= the chosen one
  const float* x;
  const SelectState* st;
  __device__ bool operator()(uint64_t i) const {
    return scalar::radixDigit(scalar::absBits(x[i]), 0) >= scalar::radixDigit(st->prefix, 0);
  }
};
struct AtOrAboveThreshold {  // key >= the threshold key (NaN/Inf always are)
  const float* x;
  const SelectState* st;
  __device__ bool operator()(uint64_t i) const { return scalar::absBits(x[i]) >= st->prefix; }
};

__global__ void equalFlagsKernel(const float* x, const uint64_t* list, size_t m, const SelectState* st,
                                 unsigned long long* equal) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < m; j += stride)
    equal[j] = scalar::absBits(x[list[j]]) == st->prefix;
}

// Taken: above the threshold, or equal to it and among the first kRemaining equal ones (equalRank is
// the exclusive prefix count of equal keys along the ascending list).
__global__ void takenFlagsKernel(const float* x, const uint64_t* list, size_t m, const SelectState* st,
                                 const unsigned long long* equalRank, unsigned char* taken) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < m; j += stride) {
    const uint32_t k = scalar::absBits(x[list[j]]);
    taken[j] = k > st->prefix || (k == st->prefix && equalRank[j] < st->kRemaining);
  }
}

// The first NaN/Inf along an ascending list whose length the device knows (a compaction's count).
__global__ void firstNonFiniteListedKernel(const float* x, const uint64_t* list, const int64_t* count,
                                           unsigned long long* first) {
  const size_t m = static_cast<size_t>(*count);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < m; j += stride)
    if (!scalar::isFiniteBits(scalar::absBits(x[list[j]]))) detail::recordFirst(first, list[j]);
}

__global__ void writeEntriesKernel(const float* x, const uint64_t* selected, size_t count, SparseOutput out) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < count; j += stride) {
    const uint64_t i = selected[j];
    const float c = x[i];
    if (out.wideIndices)
      static_cast<uint64_t*>(out.indices)[j] = i;
    else
      static_cast<uint32_t*>(out.indices)[j] = static_cast<uint32_t>(i);
    float sent = c;
    if (out.fp16Values) {
      const uint16_t h = scalar::floatToHalfBits(c);
      static_cast<uint16_t*>(out.values)[j] = h;
      sent = scalar::halfBitsToFloat(h);
    } else {
      static_cast<float*>(out.values)[j] = c;
    }
    if (out.residual) out.residual[i] = __fsub_rn(c, sent);
  }
}

__global__ void sampleKeysKernel(const float* x, size_t start, size_t stride, size_t m, uint32_t* keys,
                                 unsigned long long* finiteCount) {
  const size_t gridStride = static_cast<size_t>(gridDim.x) * blockDim.x;
  unsigned finite = 0;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < m; j += gridStride) {
    const uint32_t k = scalar::absBits(x[start + j * stride]);
    const bool ok = scalar::isFiniteBits(k);
    keys[j] = ok ? k : 0u;  // the minimum key: never the ks-th largest while ks <= the finite count
    finite += ok;
  }
  finite = __reduce_add_sync(0xffffffffu, finite);
  if ((threadIdx.x & 31) == 0 && finite) atomicAdd(finiteCount, static_cast<unsigned long long>(finite));
}

__global__ void addKernel(const float* g, const float* e, size_t n, float* c) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    c[i] = __fadd_rn(g[i], e[i]);
}

__global__ void findNonFiniteKernel(const float* x, size_t n, unsigned long long* first) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    if (!scalar::isFiniteBits(scalar::absBits(x[i]))) detail::recordFirst(first, i);
}

template <typename Index>
__global__ void scatterSparseKernel(const Index* idx, const void* values, bool fp16, size_t count, float* out,
                                    bool accumulate) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < count; j += stride) {
    const float v = fp16 ? scalar::halfBitsToFloat(static_cast<const uint16_t*>(values)[j])
                         : static_cast<const float*>(values)[j];
    out[idx[j]] = accumulate ? __fadd_rn(out[idx[j]], v) : v;  // validated: indices distinct
  }
}

__global__ void randomKGatherKernel(const float* x, scalar::FeistelPermutation perm, size_t k, void* values,
                                    bool fp16, float scale, float limit, float* residual,
                                    unsigned long long* saturated) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < k; j += stride) {
    const uint64_t i = perm(j);
    const float c = x[i];
    float sent = c;
    if (fp16) {
      const uint16_t h = scalar::floatToHalfBits(c);
      static_cast<uint16_t*>(values)[j] = h;
      sent = scalar::halfBitsToFloat(h);
    } else {
      sent = scalar::clampMagnitude(c, limit);  // unbiased: |c| x n/k must stay finite (scale_limits.h)
      static_cast<float*>(values)[j] = sent;
      if (sent != c && saturated) atomicAdd(saturated, 1ull);
    }
    if (residual) residual[i] = __fsub_rn(c, __fmul_rn(sent, scale));
  }
}

__global__ void randomKScatterKernel(const void* values, bool fp16, scalar::FeistelPermutation perm, size_t k,
                                     float scale, float* out) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < k; j += stride) {
    const float v = fp16 ? scalar::halfBitsToFloat(static_cast<const uint16_t*>(values)[j])
                         : static_cast<const float*>(values)[j];
    const uint64_t i = perm(j);  // a permutation: no two j write the same i
    out[i] = __fadd_rn(out[i], __fmul_rn(v, scale));
  }
}

template <typename T>
cudaError_t toHost(const T* device, T* host, cudaStream_t stream) {
  GC_TRY(cudaMemcpyAsync(host, device, sizeof(T), cudaMemcpyDeviceToHost, stream));
  return cudaStreamSynchronize(stream);
}

// Writes the entries of an ascending index list into the wire (and the residual).
cudaError_t writeEntries(const float* x, const uint64_t* list, size_t count, const SparseOutput& out,
                         cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  writeEntriesKernel<<<detail::gridFor(count), kThreads, 0, stream>>>(x, list, count, out);
  return cudaGetLastError();
}

// Counters a selection reads back: [0] the count of a compaction, [1] the first non-finite index.
struct Counters {
  int64_t count;
  unsigned long long firstNonFinite;
  unsigned long long finite;
};

// Starts a selection over a sample whose finite count the device knows, without a round trip:
// threshold: the sample's share of k, round(fraction * finite) clamped to [1, finite] as
// cpu::sampledThreshold; top-k bound: 25 % + 8 above that share. No finite sample: k = 0, threshold 0.
__global__ void initStateFromSampleKernel(SelectState* st, const Counters* c, double fraction, bool topkBound) {
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) st->hist[b] = 0;
  if (threadIdx.x != 0) return;
  const unsigned long long finite = c->finite;
  unsigned long long k = 0;
  if (finite && topkBound) {
    k = static_cast<unsigned long long>(1.25 * (fraction * static_cast<double>(finite))) + 8;
    k = k < finite ? k : finite;
  } else if (finite) {
    k = static_cast<unsigned long long>(fraction * static_cast<double>(finite) + 0.5);
    k = k < 1 ? 1 : (k > finite ? finite : k);
  }
  st->prefix = 0;
  st->failed = 0;
  st->kRemaining = k;
}

cudaError_t scanListForNonFinite(const float* x, const uint64_t* list, Counters* c, cudaStream_t stream) {
  firstNonFiniteListedKernel<<<kHistogramBlocks, kThreads, 0, stream>>>(x, list, &c->count, &c->firstNonFinite);
  return cudaGetLastError();
}

cudaError_t initCounters(Counters* c, cudaStream_t stream) {
  GC_TRY(cudaMemsetAsync(c, 0, sizeof(Counters), stream));
  return cudaMemsetAsync(&c->firstNonFinite, 0xff, sizeof(unsigned long long), stream);
}

}  // namespace

cudaError_t launchAdd(const float* g, const float* e, size_t n, float* c, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  addKernel<<<detail::gridFor(n), kThreads, 0, stream>>>(g, e, n, c);
  return cudaGetLastError();
}

cudaError_t findNonFinite(const float* x, size_t n, uint64_t* firstNonFinite, cudaStream_t stream) {
  *firstNonFinite = kNoIndex;
  if (n == 0) return cudaSuccess;
  Scratch<Counters> counters;
  GC_TRY(counters.allocate(1, stream));
  GC_TRY(initCounters(counters.get(), stream));
  findNonFiniteKernel<<<detail::gridFor(n), kThreads, 0, stream>>>(x, n, &counters.get()->firstNonFinite);
  GC_TRY(cudaGetLastError());
  unsigned long long first = 0;
  GC_TRY(toHost(&counters.get()->firstNonFinite, &first, stream));
  *firstNonFinite = first;
  return cudaSuccess;
}

namespace {

// The exact top-k over an ascending candidate list that holds every element whose key is at or above
// the k-th largest key of x (so the answer over the list is the answer over x): three digits over the
// list, then the ties, then the ordered compaction of the k taken ones into the wire.
cudaError_t selectFromList(const float* x, const uint64_t* list, size_t m, size_t k, const SparseOutput& out,
                           Counters* counters, cudaStream_t stream) {
  Scratch<SelectState> st;
  GC_TRY(st.allocate(1, stream));
  initStateKernel<<<1, kThreads, 0, stream>>>(st.get(), k);
  GC_TRY(cudaGetLastError());
  for (int pass = 0; pass < 3; ++pass)
    GC_TRY(selectPass(ListedAbsKeys{x, list}, m, pass, st.get(), nullptr, stream));
  // Ties: the first kRemaining keys equal to the threshold, in index order.
  Scratch<unsigned long long> equal, equalRank;
  Scratch<unsigned char> taken;
  Scratch<uint64_t> selected;
  GC_TRY(equal.allocate(m, stream));
  GC_TRY(equalRank.allocate(m, stream));
  GC_TRY(taken.allocate(m, stream));
  GC_TRY(selected.allocate(m, stream));
  equalFlagsKernel<<<detail::gridFor(m), kThreads, 0, stream>>>(x, list, m, st.get(), equal.get());
  GC_TRY(cudaGetLastError());
  size_t bytes = 0;
  GC_TRY(cub::DeviceScan::ExclusiveSum(nullptr, bytes, equal.get(), equalRank.get(), static_cast<int64_t>(m), stream));
  {
    Scratch<unsigned char> temp;
    GC_TRY(temp.allocate(bytes, stream));
    GC_TRY(cub::DeviceScan::ExclusiveSum(temp.get(), bytes, equal.get(), equalRank.get(), static_cast<int64_t>(m),
                                         stream));
  }
  takenFlagsKernel<<<detail::gridFor(m), kThreads, 0, stream>>>(x, list, m, st.get(), equalRank.get(), taken.get());
  GC_TRY(cudaGetLastError());
  // The taken ones are k by construction (above the threshold, plus kRemaining equal ones); the
  // compaction target has room for the whole list all the same, and the count is checked.
  bytes = 0;
  GC_TRY(cub::DeviceSelect::Flagged(nullptr, bytes, list, taken.get(), selected.get(), &counters->count,
                                    static_cast<int64_t>(m), stream));
  {
    Scratch<unsigned char> temp;
    GC_TRY(temp.allocate(bytes, stream));
    GC_TRY(cub::DeviceSelect::Flagged(temp.get(), bytes, list, taken.get(), selected.get(), &counters->count,
                                      static_cast<int64_t>(m), stream));
  }
  int64_t got = 0;
  GC_TRY(toHost(&counters->count, &got, stream));
  uint32_t failed = 0;
  GC_TRY(toHost(&st.get()->failed, &failed, stream));
  if (failed || static_cast<uint64_t>(got) != k) return cudaErrorAssert;
  return writeEntries(x, selected.get(), k, out, stream);
}

// Keys sampled for the candidate bound: a strided sample of this many elements (1 MiB of keys).
constexpr size_t kTopKSample = size_t{1} << 18;

}  // namespace

cudaError_t exactTopK(const float* x, size_t n, size_t k, SparseOutput out, uint64_t* firstNonFinite,
                      cudaStream_t stream) {
  *firstNonFinite = kNoIndex;
  if (k == 0 || k > n) return k == 0 ? cudaSuccess : cudaErrorInvalidValue;
  Scratch<Counters> counters;
  Scratch<uint64_t> list;
  GC_TRY(counters.allocate(1, stream));
  GC_TRY(list.allocate(n, stream));
  GC_TRY(initCounters(counters.get(), stream));
  Counters host{};
  auto readCounters = [&]() -> cudaError_t {
    GC_TRY(cudaMemcpyAsync(&host, counters.get(), sizeof(Counters), cudaMemcpyDeviceToHost, stream));
    return cudaStreamSynchronize(stream);
  };

  // 1. One read: a bound from a strided sample (its kS-th largest key, kS 25 % + 8 above the expected
  // share of the top k), then the ordered list of every element at or above it. When the list holds
  // at least k, it holds the whole top k (ties included) and the rest works on it alone. NaN/Inf keys
  // are above any finite bound, so the list also finds the first of them.
  const size_t m = std::min(n, kTopKSample), stride = n / m;
  {
    Scratch<uint32_t> keys;
    Scratch<SelectState> st;
    GC_TRY(keys.allocate(m, stream));
    GC_TRY(st.allocate(1, stream));
    sampleKeysKernel<<<detail::gridFor(m), kThreads, 0, stream>>>(x, 0, stride, m, keys.get(), &counters.get()->finite);
    GC_TRY(cudaGetLastError());
    initStateFromSampleKernel<<<1, kThreads, 0, stream>>>(st.get(), counters.get(),
                                                          static_cast<double>(k) / static_cast<double>(n), true);
    GC_TRY(cudaGetLastError());
    for (int pass = 0; pass < 3; ++pass) GC_TRY(selectPass(PlainKeys{keys.get()}, m, pass, st.get(), nullptr, stream));
    GC_TRY(selectIndices(n, AtOrAboveThreshold{x, st.get()}, list.get(), &counters.get()->count, stream));
    GC_TRY(scanListForNonFinite(x, list.get(), counters.get(), stream));
    GC_TRY(readCounters());  // the one wait of this path before the list's own selection
    if (host.firstNonFinite != kNoIndex) {
      *firstNonFinite = host.firstNonFinite;
      return cudaSuccess;
    }
    const size_t candidates = static_cast<size_t>(host.count);
    if (host.finite && candidates >= k)
      return selectFromList(x, list.get(), candidates, k, out, counters.get(), stream);
  }

  // 2. The bound admitted fewer than k (or the sample held no finite value): a histogram of the top
  // 11 bits over the whole input picks the bucket of the k-th largest key, and the list is everything
  // in that bucket or above.
  Scratch<SelectState> st;
  GC_TRY(st.allocate(1, stream));
  initStateKernel<<<1, kThreads, 0, stream>>>(st.get(), k);
  GC_TRY(cudaGetLastError());
  GC_TRY(selectPass(AbsKeys{x}, n, 0, st.get(), &counters.get()->firstNonFinite, stream));
  GC_TRY(selectIndices(n, AtOrAboveTopBucket{x, st.get()}, list.get(), &counters.get()->count, stream));
  GC_TRY(readCounters());
  if (host.firstNonFinite != kNoIndex) {
    *firstNonFinite = host.firstNonFinite;
    return cudaSuccess;
  }
  return selectFromList(x, list.get(), static_cast<size_t>(host.count), k, out, counters.get(), stream);
}

cudaError_t thresholdSelect(const float* x, size_t n, size_t k, size_t minSample, uint64_t offset, size_t cap,
                            const std::function<SparseOutput(uint64_t count)>& outputFor, uint64_t* count,
                            bool* overflow, uint64_t* firstNonFinite, cudaStream_t stream) {
  *count = 0;
  *overflow = false;
  *firstNonFinite = kNoIndex;
  if (k == 0 || n == 0) return cudaSuccess;
  // The sample, exactly as cpu::sampledThreshold strides it.
  constexpr double kSampledHits = 2048;
  const double fraction = static_cast<double>(k) / static_cast<double>(n);
  const size_t want = std::max<size_t>(minSample, static_cast<size_t>(kSampledHits / fraction));
  const size_t stride = std::max<size_t>(1, n / std::max<size_t>(1, want));
  const size_t start = offset % stride;
  const size_t m = start < n ? (n - start + stride - 1) / stride : 0;
  Scratch<SelectState> st;
  Scratch<Counters> counters;
  Scratch<uint32_t> keys;
  GC_TRY(st.allocate(1, stream));
  GC_TRY(counters.allocate(1, stream));
  GC_TRY(keys.allocate(m, stream));
  GC_TRY(initCounters(counters.get(), stream));
  if (m) {
    sampleKeysKernel<<<detail::gridFor(m), kThreads, 0, stream>>>(x, start, stride, m, keys.get(),
                                                                   &counters.get()->finite);
    GC_TRY(cudaGetLastError());
  }
  initStateFromSampleKernel<<<1, kThreads, 0, stream>>>(st.get(), counters.get(), fraction, false);
  GC_TRY(cudaGetLastError());
  if (m)
    for (int pass = 0; pass < 3; ++pass) GC_TRY(selectPass(PlainKeys{keys.get()}, m, pass, st.get(), nullptr, stream));
  // Everything at or above the threshold, in index order, and the first NaN/Inf among it (any NaN/Inf
  // is above every finite threshold): one wait for both.
  Scratch<uint64_t> list;
  GC_TRY(list.allocate(n, stream));
  GC_TRY(selectIndices(n, AtOrAboveThreshold{x, st.get()}, list.get(), &counters.get()->count, stream));
  GC_TRY(scanListForNonFinite(x, list.get(), counters.get(), stream));
  Counters host{};
  GC_TRY(cudaMemcpyAsync(&host, counters.get(), sizeof(Counters), cudaMemcpyDeviceToHost, stream));
  GC_TRY(cudaStreamSynchronize(stream));
  *count = static_cast<uint64_t>(host.count);
  if (*count > cap) {  // checked first, as the CPU does: the exact path reports any NaN/Inf itself
    *overflow = true;
    return cudaSuccess;
  }
  if (host.firstNonFinite != kNoIndex) {
    *firstNonFinite = host.firstNonFinite;
    return cudaSuccess;
  }
  return writeEntries(x, list.get(), *count, outputFor(*count), stream);
}

cudaError_t launchScatterSparse(const void* indices, bool wideIndices, const void* values, bool fp16Values,
                                size_t count, float* out, bool accumulate, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (wideIndices)
    scatterSparseKernel<<<detail::gridFor(count), kThreads, 0, stream>>>(static_cast<const uint64_t*>(indices), values,
                                                                          fp16Values, count, out, accumulate);
  else
    scatterSparseKernel<<<detail::gridFor(count), kThreads, 0, stream>>>(static_cast<const uint32_t*>(indices), values,
                                                                          fp16Values, count, out, accumulate);
  return cudaGetLastError();
}

cudaError_t launchRandomKGather(const float* x, scalar::FeistelPermutation perm, size_t k, void* values,
                                bool fp16Values, float scale, float* residual, unsigned long long* saturated,
                                cudaStream_t stream) {
  if (k == 0) return cudaSuccess;
  randomKGatherKernel<<<detail::gridFor(k), kThreads, 0, stream>>>(x, perm, k, values, fp16Values, scale,
                                                                   scalar::largestScaledValue(scale), residual, saturated);
  return cudaGetLastError();
}

cudaError_t launchRandomKScatter(const void* values, bool fp16Values, scalar::FeistelPermutation perm, size_t k,
                                 float scale, float* out, cudaStream_t stream) {
  if (k == 0) return cudaSuccess;
  randomKScatterKernel<<<detail::gridFor(k), kThreads, 0, stream>>>(values, fp16Values, perm, k, scale, out);
  return cudaGetLastError();
}

}  // namespace gradcomp::cuda
