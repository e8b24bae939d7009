#include "collectives/mpi_communicator.h"

#include <sched.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <thread>

#include "core/error.h"

#ifdef GRADCOMP_HAVE_MPI
#include <mpi.h>
#endif

namespace gradcomp {
namespace {
std::atomic<bool> gFailed{false};
}

void MpiSession::markFailed() { gFailed = true; }

#ifndef GRADCOMP_HAVE_MPI

bool MpiSession::available() { return false; }
MpiSession::MpiSession(int*, char***) {
  GRADCOMP_THROW(BackendUnavailable, "this build has no MPI (configure with GRADCOMP_WITH_MPI=ON and Open MPI installed)");
}
MpiSession::~MpiSession() = default;
std::unique_ptr<Communicator> MpiSession::world(CommunicatorOptions) { return nullptr; }

#else

namespace {

std::string mpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

#define GRADCOMP_MPI_CHECK(call)                                                                             \
  do {                                                                                                       \
    const int gcRc_ = (call);                                                                                \
    if (gcRc_ != MPI_SUCCESS) {                                                                              \
      ::gradcomp::MpiSession::markFailed();                                                                  \
      GRADCOMP_THROW(::gradcomp::TransportError, #call " failed: ", mpiErrorString(gcRc_));                  \
    }                                                                                                        \
  } while (0)

struct MpiRequestState : Request::State {
  MPI_Request request = MPI_REQUEST_NULL;
  size_t bytes = 0;
};

int maxTag() {
  void* value = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &flag);
  return flag ? *static_cast<int*>(value) : 32767;
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, std::vector<int> worldRanks, std::vector<int> nodes,
                  CommunicatorOptions options, std::shared_ptr<TrafficStats> traffic)
      : Communicator("mpi", rank, std::move(worldRanks), std::move(nodes), options, std::move(traffic)), comm_(comm) {
    GRADCOMP_CHECK(maxTag() >= static_cast<int>(makeTag(kTagSequenceMask, 0xFF)), BackendUnavailable,
                   "MPI_TAG_UB is ", maxTag(), ", gradcomp's tags need ", makeTag(kTagSequenceMask, 0xFF));
  }
  ~MpiCommunicator() override {
    // A communicator that failed may have requests pending forever: freeing it could block.
    if (!gFailed) MPI_Comm_free(&comm_);
  }

  Request isend(std::span<const std::byte> data, int peer, Tag tag) override {
    auto s = std::make_shared<MpiRequestState>();
    s->bytes = data.size();
    GRADCOMP_MPI_CHECK(MPI_Isend(data.data(), byteCount(data.size()), MPI_BYTE, peer, static_cast<int>(tag), comm_,
                                 &s->request));
    countSend(peer, data.size());
    return Request(s, peer, false, tag);
  }

  Request irecv(std::span<std::byte> buffer, int peer, Tag tag) override {
    auto s = std::make_shared<MpiRequestState>();
    GRADCOMP_MPI_CHECK(MPI_Irecv(buffer.data(), byteCount(buffer.size()), MPI_BYTE, peer, static_cast<int>(tag), comm_,
                                 &s->request));
    return Request(s, peer, true, tag);
  }

  size_t wait(Request& r, Deadline d, const char* what) override {
    auto& s = r.as<MpiRequestState>();
    if (s.done) return s.bytes;
    MPI_Status status;
    int flag = 0;
    for (unsigned spin = 0;; ++spin) {
      const int rc = MPI_Test(&s.request, &flag, &status);
      if (rc != MPI_SUCCESS) {
        MpiSession::markFailed();
        int cls = 0;
        MPI_Error_class(rc, &cls);
        if (cls == MPI_ERR_TRUNCATE)
          GRADCOMP_THROW(TransportError, "mpi rank ", rank_, ": ", what, ": the message from rank ", r.peer(),
                         " is larger than the receive buffer");
        GRADCOMP_THROW(PeerFailure, "mpi rank ", rank_, ": ", what, ": MPI reported an error for rank ", r.peer(),
                       " (operation #", (r.tag() >> kTagPhaseBits), "): ", mpiErrorString(rc));
      }
      if (flag) break;
      if (d.passed()) {
        MpiSession::markFailed();
        throwTimeout(r, what);
      }
      // Ranks may outnumber cores (mpirun --oversubscribe): give the core away while waiting.
      if (spin < 64) sched_yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(spin < 1024 ? 5 : 50));
    }
    s.done = true;
    if (r.isRecv()) {
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      s.bytes = static_cast<size_t>(count);
      countReceive(r.peer(), s.bytes);
    }
    return s.bytes;
  }

  void vendorAllreduceSum(std::span<float> data, Deadline d, uint64_t sequence, bool blocking) override {
    auto s = std::make_shared<MpiRequestState>();
    GRADCOMP_CHECK_ARG(data.size() <= static_cast<size_t>(INT_MAX), "vendor all-reduce of ", data.size(),
                       " elements exceeds MPI's int count");
    if (blocking) {
      GRADCOMP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT, MPI_SUM,
                                       comm_));
      traffic_->recordSend(worldRank((rank_ + 1) % size()), linkClass((rank_ + 1) % size()),
                           2 * (static_cast<uint64_t>(size()) - 1) * data.size_bytes() / static_cast<uint64_t>(size()));
      return;
    }
    GRADCOMP_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT, MPI_SUM,
                                      comm_, &s->request));
    // Ring-equivalent bytes (2(P-1)/P * S): what the library's algorithm moves is not observable.
    const uint64_t bytes = 2 * (static_cast<uint64_t>(size()) - 1) * data.size_bytes() / static_cast<uint64_t>(size());
    traffic_->recordSend(worldRank((rank_ + 1) % size()), linkClass((rank_ + 1) % size()), bytes);
    Request r(s, -1, false, makeTag(sequence, 0x30));
    int flag = 0;
    for (unsigned spin = 0; !flag; ++spin) {
      GRADCOMP_MPI_CHECK(MPI_Test(&s->request, &flag, MPI_STATUS_IGNORE));
      if (flag) break;
      if (d.passed()) {
        MpiSession::markFailed();
        GRADCOMP_THROW(TimeoutError, "mpi rank ", rank_, ": vendor all-reduce #", sequence, " did not complete within ",
                       options_.timeoutSeconds, " s (a peer is dead, stopped, slow, or running another operation)");
      }
      if (spin < 64) sched_yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(spin < 1024 ? 5 : 50));
    }
  }

 protected:
  std::unique_ptr<Communicator> makeChild(const std::vector<int>& members, int newRank, int color, int key) override {
    MPI_Comm child;
    // Every rank reached this point after split()'s deadline-checked agreement, so this blocking call
    // has all its participants.
    GRADCOMP_MPI_CHECK(MPI_Comm_split(comm_, color, key, &child));
    GRADCOMP_MPI_CHECK(MPI_Comm_set_errhandler(child, MPI_ERRORS_RETURN));
    std::vector<int> world, nodes;
    for (int m : members) {
      world.push_back(worldRank(m));
      nodes.push_back(node(m));
    }
    return std::make_unique<MpiCommunicator>(child, newRank, std::move(world), std::move(nodes), options_, traffic_);
  }

 private:
  static int byteCount(size_t bytes) {
    GRADCOMP_CHECK_ARG(bytes <= static_cast<size_t>(INT_MAX), "MPI message of ", bytes,
                       " bytes exceeds the int count limit (2 GiB); use a smaller chunk");
    return static_cast<int>(bytes);
  }

  MPI_Comm comm_;
};

}  // namespace

bool MpiSession::available() { return true; }

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    GRADCOMP_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
    owns_ = true;
  }
}

MpiSession::~MpiSession() {
  if (owns_ && !gFailed) MPI_Finalize();
}

std::unique_ptr<Communicator> MpiSession::world(CommunicatorOptions options) {
  MPI_Comm comm;
  GRADCOMP_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  GRADCOMP_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<int> nodes(static_cast<size_t>(size));
  if (options.ranksPerNode > 0) {
    for (int r = 0; r < size; ++r) nodes[static_cast<size_t>(r)] = r / options.ranksPerNode;
  } else {
    // Node id = the lowest world rank sharing memory with this one.
    MPI_Comm local;
    GRADCOMP_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
    int leader = rank;
    GRADCOMP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, local));
    MPI_Comm_free(&local);
    GRADCOMP_MPI_CHECK(MPI_Allgather(&leader, 1, MPI_INT, nodes.data(), 1, MPI_INT, comm));
  }
  std::vector<int> world(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) world[static_cast<size_t>(r)] = r;
  return std::make_unique<MpiCommunicator>(comm, rank, std::move(world), std::move(nodes), options,
                                           std::make_shared<TrafficStats>(size));
}

#endif

}  // namespace gradcomp
