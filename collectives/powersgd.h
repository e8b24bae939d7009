// PowerSGD's public pieces beside the `powersgd` all-reduce algorithm (collectives/powersgd_allreduce.cc):
// the warm start's initial Q, so a reference implementation (the torch equivalence test) can start
// from the same matrix.
#pragma once

#include <cstdint>
#include <vector>

namespace gradcomp {

// The cols x rank row-major matrix of (approximately) standard normals from Philox that matrix `segment` of
// tensor (bucket) `tensorId` starts from, before its first orthogonalization; the same on every rank
// for the same seed.
std::vector<float> powerSgdInitialQ(uint64_t seed, uint32_t tensorId, uint32_t segment, uint64_t cols, uint64_t rank);

}  // namespace gradcomp
