// The summation order of PowerSGD's orthogonalization, shared by the CPU (kernels/cpu/low_rank.cc) and the
// CUDA kernel (kernels/cuda/low_rank.cu) so that both orthogonalize to the same bits: a dot product of n
// terms is kLowRankLanes partial sums, lane l taking the terms i = l, l + 8, ... in index order, and the
// lanes added pairwise at the end. A CPU loop over contiguous terms computes exactly this with 8-wide
// vectors; a GPU thread computes one lane of a strided column.
#pragma once

#include <cstddef>

#include "kernels/scalar/host_device.h"

namespace gradcomp::scalar {

constexpr size_t kLowRankLanes = 8;

// The lanes of one dot product, added pairwise.
GRADCOMP_HD float lowRankLaneSum(const float* lane) {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// Lane `lane`'s partial sum of sum_i a[i * strideA] * b[i * strideB] over i < n (the terms i = lane mod 8,
// in index order). Every product and sum is one fp32 operation: CUDA builds with --fmad=false and the CPU
// with -ffp-contract=off, so neither fuses them into an FMA.
GRADCOMP_HD float lowRankLaneDot(const float* a, size_t strideA, const float* b, size_t strideB, size_t n,
                                 size_t lane) {
  float sum = 0.0f;
  for (size_t i = lane; i < n; i += kLowRankLanes) sum += a[i * strideA] * b[i * strideB];
  return sum;
}

}  // namespace gradcomp::scalar
