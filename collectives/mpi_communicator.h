// The MPI transport (Open MPI): nonblocking point-to-point on a duplicate of MPI_COMM_WORLD with
// MPI_ERRORS_RETURN (so an error is an exception here, not an abort of the job), waits polled with
// MPI_Test against the deadline, node groups from MPI_COMM_TYPE_SHARED or an explicit ranks-per-node.
// After a timeout the communicator is dead (pending requests cannot be cancelled portably): the process
// should report and exit, which is what MpiSession's destructor allows (it skips MPI_Finalize then).
#pragma once

#include <memory>

#include "collectives/communicator.h"

namespace gradcomp {

// MPI_Init_thread on construction (if MPI is not initialized yet), MPI_Finalize on destruction unless a
// communicator failed (finalizing with a dead peer can block forever).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  static void markFailed();  // called by a communicator that threw
  static bool available();   // compiled with MPI

  // The world communicator (a duplicate of MPI_COMM_WORLD).
  std::unique_ptr<Communicator> world(CommunicatorOptions options = {});

 private:
  bool owns_ = false;
};

}  // namespace gradcomp
