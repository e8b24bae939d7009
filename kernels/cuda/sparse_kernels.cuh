// CUDA twins of the sparse codecs' selection and scatter (kernels/cpu/topk_select.h,
// compressors/sparse_payload.h, compressors/randomk_codec.cc): exact top-k by an 11-bit-digit radix
// select over the |x| bits, DGC's sampled threshold, random-k's keyed permutation. The selections are
// exact, so they are the CPU's: the k largest |x|, ties to the lower index, indices ascending.
//
// The selecting functions are host functions that enqueue on `stream` and wait on it to learn counts
// (the size of the candidate list, whether a threshold overshot); every buffer they need comes from
// cudaMallocAsync on that stream and is freed before they return.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "kernels/scalar/feistel_permutation.h"

namespace gradcomp::cuda {

// Where a selection goes: the wire's index and value sections, and optionally the residual.
struct SparseOutput {
  void* indices = nullptr;  // uint32 or, with wideIndices, uint64
  bool wideIndices = false;
  void* values = nullptr;  // fp32 or, with fp16Values, fp16 bits
  bool fp16Values = false;
  // Null, or the array holding c (the selection's input): each selected c[i] becomes c[i] - wire(c[i]),
  // the error-feedback residual of a sparse codec.
  float* residual = nullptr;
};

inline constexpr uint64_t kNoIndex = ~uint64_t{0};

// c = g + e, rounded as the CPU's fp32 add (the fused error-feedback input of the sparse codecs).
cudaError_t launchAdd(const float* g, const float* e, size_t n, float* c, cudaStream_t stream);

// Exact top-k of |x| (1 <= k <= n). firstNonFinite: the smallest index holding NaN/Inf (kNoIndex if
// none; then nothing is written). One read of the input in the usual case: a strided sample of 2^18
// keys gives a bound admitting about 1.25 k elements, an ordered compaction gathers them, and the
// 11/11/9-bit radix select, the ties and the output run on that list alone. Should the bound admit
// fewer than k, a histogram of the top 11 bits over the input picks the bucket instead (a second
// read); on data within one 1/8-octave bucket the list is the whole input.
cudaError_t exactTopK(const float* x, size_t n, size_t k, SparseOutput out, uint64_t* firstNonFinite,
                      cudaStream_t stream);

// DGC threshold (cpu::sampledThreshold, then every |x| >= threshold in index order). *count: how many
// were at or above the threshold; when that exceeds cap nothing is written and *overflow is set (the
// codec then runs exactTopK). Otherwise the entries go to outputFor(*count) (the wire layout depends
// on the count). firstNonFinite as above.
cudaError_t thresholdSelect(const float* x, size_t n, size_t k, size_t minSample, uint64_t offset, size_t cap,
                            const std::function<SparseOutput(uint64_t count)>& outputFor, uint64_t* count,
                            bool* overflow, uint64_t* firstNonFinite, cudaStream_t stream);

// Scatters a validated sparse payload: out[idx[j]] = value[j] (accumulate: +=). The caller zeroes out
// first for an overwrite, as the CPU decoder does.
cudaError_t launchScatterSparse(const void* indices, bool wideIndices, const void* values, bool fp16Values,
                                size_t count, float* out, bool accumulate, cudaStream_t stream);

// Random-k: values[j] = x[perm(j)] (fp32 or fp16 bits), j < k, fp32 clamped to the largest magnitude whose
// product with scale is finite (counted in *saturated, which may be null); with residual (holding c = x):
// residual[perm(j)] = c - wire(c) * scale.
cudaError_t launchRandomKGather(const float* x, scalar::FeistelPermutation perm, size_t k, void* values,
                                bool fp16Values, float scale, float* residual, unsigned long long* saturated,
                                cudaStream_t stream);
// out[perm(j)] += value[j] * scale (the caller zeroes out first for an overwrite).
cudaError_t launchRandomKScatter(const void* values, bool fp16Values, scalar::FeistelPermutation perm, size_t k,
                                 float scale, float* out, cudaStream_t stream);
// Smallest index holding NaN/Inf in x (a plain scan; random-k checks its whole input as the CPU does).
cudaError_t findNonFinite(const float* x, size_t n, uint64_t* firstNonFinite, cudaStream_t stream);

}  // namespace gradcomp::cuda
