// GPU buffers over a transport that moves host memory (MPI, in-process): copy to the host, run the
// algorithm there, copy back. This is how a one-GPU machine tests the GPU path (NCCL refuses two ranks
// on one GPU). Without CUDA compiled in, a BackendUnavailable error.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "collectives/allreduce.h"

namespace gradcomp {

AllreduceReport runWithHostStaging(std::span<float> deviceData, const ExecContext& exec,
                                   const std::function<AllreduceReport(std::span<float>)>& onHost);

// What AllreduceAlgorithm::run does to the buffer itself when an algorithm sums device buffers in place
// (sumsDeviceBuffers: powersgd): on exec's device and stream, complete on return. Without CUDA compiled
// in, BackendUnavailable.
// Throws BackendUnavailable naming `what` unless exec's CUDA device answers.
void requireCudaDevice(const ExecContext& exec, const std::string& what);
uint64_t firstNonFiniteOnDevice(std::span<const float> deviceData, const ExecContext& exec);
void zeroOnDevice(std::span<float> deviceData, const ExecContext& exec);
void divideOnDevice(std::span<float> deviceData, float d, const ExecContext& exec);
std::vector<float> copyToHost(std::span<const float> deviceData, const ExecContext& exec);

}  // namespace gradcomp
