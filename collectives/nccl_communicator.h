// The NCCL transport (GPU buffers). Sends and receives are ncclSend/ncclRecv issued inside
// ncclGroupStart/End (a ring's send and receive must be one group or the ranks wait on each other);
// completion is a CUDA event, and wait() polls the event and ncclCommGetAsyncError against the deadline,
// then ncclCommAbort (never ncclCommDestroy on a broken communicator: it can block forever).
// NCCL matches exact byte counts: a receive must be posted with the size the peer sends, so only the
// fixed-size paths run on it (vendor; the codecs reach GPUs through MPI with host staging until the
// CUDA kernels land). NCCL refuses two ranks on one GPU: exercising it needs two or more GPUs.
#pragma once

#include <memory>

#include "collectives/communicator.h"

namespace gradcomp {

// Collective over `bootstrap` (rank 0 makes the unique id and sends it to every rank). Nonblocking
// init, polled against the bootstrap's deadline. Throws BackendUnavailable without NCCL.
std::unique_ptr<Communicator> makeNcclCommunicator(Communicator& bootstrap, int cudaDevice, void* cudaStream);

}  // namespace gradcomp
