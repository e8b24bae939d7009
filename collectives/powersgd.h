// PowerSGD's public pieces beside the `powersgd` all-reduce algorithm (collectives/powersgd_allreduce.cc):
// the warm start's initial Q, so a reference implementation (the torch equivalence test) can start
// from the same matrix, and how its `batch` option groups a bucket's matrices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gradcomp {

// A compressed matrix's shape: rows x cols, approximated at rank `rank`.
struct MatrixShape {
  uint64_t rows = 0, cols = 0, rank = 0;
};

// The batches PowerSGD's math runs a bucket's compressed matrices in (indices into `shapes`, in bucket
// order): with `batch`, one batch per distinct shape in the order shapes first appear, each holding every
// matrix of that shape (torch's batch_tensors_with_same_shape); without, one batch per matrix.
std::vector<std::vector<size_t>> powerSgdBatches(std::span<const MatrixShape> shapes, bool batch);

// The cols x rank row-major matrix of (approximately) standard normals from Philox that matrix `segment` of
// tensor (bucket) `tensorId` starts from, before its first orthogonalization; the same on every rank
// for the same seed.
std::vector<float> powerSgdInitialQ(uint64_t seed, uint32_t tensorId, uint32_t segment, uint64_t cols, uint64_t rank);

}  // namespace gradcomp
