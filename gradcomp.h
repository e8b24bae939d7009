// gradcomp's public header for a user's own trainer: communicators (in-process, MPI), the gradient
// reducer (bucketed, compressed, overlapped all-reduce of gradients), all-reduce algorithms, codecs,
// error feedback and optimizers. See examples/custom_trainer.cc.
#pragma once

#include "collectives/allreduce.h"
#include "collectives/communicator.h"
#include "collectives/inprocess_communicator.h"
#include "collectives/mpi_communicator.h"
#include "compressors/error_feedback.h"
#include "compressors/registry.h"
#include "core/error.h"
#include "training/gradient_reducer.h"
#include "training/optimizer.h"
#include "training/parameter_layout.h"
