// GPU buffers over a transport that moves host memory (MPI, in-process): copy to the host, run the
// algorithm there, copy back. This is how a one-GPU machine tests the GPU path (NCCL refuses two ranks
// on one GPU). Without CUDA compiled in, a BackendUnavailable error.
#pragma once

#include <functional>
#include <span>

#include "collectives/allreduce.h"

namespace gradcomp {

AllreduceReport runWithHostStaging(std::span<float> deviceData, const ExecContext& exec,
                                   const std::function<AllreduceReport(std::span<float>)>& onHost);

}  // namespace gradcomp
