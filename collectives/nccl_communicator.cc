#include "collectives/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <thread>
#include <vector>

#include "core/cuda_check.h"
#include "core/error.h"

namespace gradcomp {
namespace {

#define GRADCOMP_NCCL_CHECK(call)                                                                    \
  do {                                                                                               \
    const ncclResult_t gcRc_ = (call);                                                               \
    if (gcRc_ != ncclSuccess && gcRc_ != ncclInProgress)                                             \
      GRADCOMP_THROW(::gradcomp::TransportError, #call " failed: ", ncclGetErrorString(gcRc_));      \
  } while (0)

struct NcclRequestState : Request::State {
  std::shared_ptr<cudaEvent_t> event;  // shared by every request of one group
  size_t bytes = 0;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, int rank, std::vector<int> worldRanks, std::vector<int> nodes,
                   CommunicatorOptions options, std::shared_ptr<TrafficStats> traffic)
      : Communicator("nccl", rank, std::move(worldRanks), std::move(nodes), options, std::move(traffic)),
        comm_(comm),
        stream_(stream) {}
  ~NcclCommunicator() override {
    if (broken_) ncclCommAbort(comm_);
    else ncclCommDestroy(comm_);
  }

  bool deviceBuffers() const override { return true; }

  void groupStart() override {
    GRADCOMP_NCCL_CHECK(ncclGroupStart());
    inGroup_ = true;
  }
  void groupEnd() override {
    inGroup_ = false;
    GRADCOMP_NCCL_CHECK(ncclGroupEnd());
    recordPending();
  }

  Request isend(std::span<const std::byte> data, int peer, Tag tag) override {
    auto s = std::make_shared<NcclRequestState>();
    s->bytes = data.size();
    GRADCOMP_NCCL_CHECK(ncclSend(data.data(), data.size(), ncclUint8, peer, comm_, stream_));
    countSend(peer, data.size());
    return issued(s, peer, false, tag);
  }

  Request irecv(std::span<std::byte> buffer, int peer, Tag tag) override {
    auto s = std::make_shared<NcclRequestState>();
    s->bytes = buffer.size();  // NCCL receives exactly this many bytes
    GRADCOMP_NCCL_CHECK(ncclRecv(buffer.data(), buffer.size(), ncclUint8, peer, comm_, stream_));
    return issued(s, peer, true, tag);
  }

  size_t wait(Request& r, Deadline d, const char* what) override {
    auto& s = r.as<NcclRequestState>();
    if (s.done) return s.bytes;
    pollUntil([&] { return cudaEventQuery(*s.event) == cudaSuccess; }, d, &r, what);
    s.done = true;
    if (r.isRecv()) countReceive(r.peer(), s.bytes);
    return s.bytes;
  }

  void vendorAllreduceSum(std::span<float> data, Deadline d, uint64_t sequence, bool) override {
    GRADCOMP_NCCL_CHECK(ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, comm_, stream_));
    cudaEvent_t e;
    GRADCOMP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    GRADCOMP_CUDA_CHECK(cudaEventRecord(e, stream_));
    const uint64_t bytes = 2 * (static_cast<uint64_t>(size()) - 1) * data.size_bytes() / static_cast<uint64_t>(size());
    traffic_->recordSend(worldRank((rank_ + 1) % size()), linkClass((rank_ + 1) % size()), bytes);
    try {
      pollUntil([&] { return cudaEventQuery(e) == cudaSuccess; }, d, nullptr, "vendor all-reduce");
    } catch (...) {
      cudaEventDestroy(e);
      throw;
    }
    cudaEventDestroy(e);
    (void)sequence;
  }

 protected:
  std::unique_ptr<Communicator> makeChild(const std::vector<int>& members, int newRank, int color, int key) override {
    ncclComm_t child;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    GRADCOMP_NCCL_CHECK(ncclCommSplit(comm_, color, key, &child, &config));
    pollUntil([&] {
      ncclResult_t state;
      ncclCommGetAsyncError(child, &state);
      return state != ncclInProgress;
    }, deadline(), nullptr, "ncclCommSplit");
    std::vector<int> world, nodes;
    for (int m : members) {
      world.push_back(worldRank(m));
      nodes.push_back(node(m));
    }
    return std::make_unique<NcclCommunicator>(child, stream_, newRank, std::move(world), std::move(nodes), options_,
                                              traffic_);
  }

 private:
  Request issued(std::shared_ptr<NcclRequestState> s, int peer, bool isRecv, Tag tag) {
    pending_.push_back(s);
    if (!inGroup_) recordPending();
    return Request(s, peer, isRecv, tag);
  }

  void recordPending() {
    if (pending_.empty()) return;
    auto event = std::shared_ptr<cudaEvent_t>(new cudaEvent_t, [](cudaEvent_t* e) {
      cudaEventDestroy(*e);
      delete e;
    });
    GRADCOMP_CUDA_CHECK(cudaEventCreateWithFlags(event.get(), cudaEventDisableTiming));
    GRADCOMP_CUDA_CHECK(cudaEventRecord(*event, stream_));
    for (auto& s : pending_) s->event = event;
    pending_.clear();
  }

  template <typename Done>
  void pollUntil(Done&& done, Deadline d, const Request* r, const char* what) {
    for (unsigned spin = 0;; ++spin) {
      if (done()) return;
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        broken_ = true;
        ncclCommAbort(comm_);
        GRADCOMP_THROW(PeerFailure, "nccl rank ", rank_, ": ", what, ": NCCL reported ", ncclGetErrorString(async),
                       r ? " while waiting on rank " : "", r ? std::to_string(r->peer()) : std::string());
      }
      if (d.passed()) {
        broken_ = true;
        ncclCommAbort(comm_);
        if (r) throwTimeout(*r, what);
        GRADCOMP_THROW(TimeoutError, "nccl rank ", rank_, ": ", what, " did not complete within ",
                       options_.timeoutSeconds, " s; the communicator was aborted");
      }
      if (spin > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  bool inGroup_ = false;
  bool broken_ = false;
  std::vector<std::shared_ptr<NcclRequestState>> pending_;
};

}  // namespace

std::unique_ptr<Communicator> makeNcclCommunicator(Communicator& bootstrap, int cudaDevice, void* cudaStream) {
  GRADCOMP_CHECK_ARG(!bootstrap.deviceBuffers(), "the NCCL bootstrap must be a host communicator (MPI, in-process)");
  GRADCOMP_CUDA_CHECK(cudaSetDevice(cudaDevice));
  ncclUniqueId id;
  const Communicator::OperationScope scope(bootstrap, "NCCL bootstrap");
  const uint64_t seq = scope.sequence();
  const Tag tag = makeTag(seq, 0x50);
  if (bootstrap.rank() == 0) {
    GRADCOMP_NCCL_CHECK(ncclGetUniqueId(&id));
    std::vector<Request> sends;
    for (int r = 1; r < bootstrap.size(); ++r)
      sends.push_back(bootstrap.isend(std::as_bytes(std::span(&id, 1)), r, tag));
    waitAll(bootstrap, sends, bootstrap.deadline(), "NCCL unique id");
  } else {
    Request q = bootstrap.irecv(std::as_writable_bytes(std::span(&id, 1)), 0, tag);
    bootstrap.wait(q, bootstrap.deadline(), "NCCL unique id");
  }
  ncclComm_t comm;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init can then be polled against the deadline instead of hanging
  GRADCOMP_NCCL_CHECK(ncclCommInitRankConfig(&comm, bootstrap.size(), id, bootstrap.rank(), &config));
  const Deadline d = bootstrap.deadline();
  for (;;) {
    ncclResult_t state;
    ncclCommGetAsyncError(comm, &state);
    if (state == ncclSuccess) break;
    if (state != ncclInProgress) {
      ncclCommAbort(comm);
      GRADCOMP_THROW(TransportError, "ncclCommInitRankConfig failed: ", ncclGetErrorString(state));
    }
    if (d.passed()) {
      ncclCommAbort(comm);
      GRADCOMP_THROW(TimeoutError, "NCCL communicator init did not complete within ", bootstrap.timeoutSeconds(), " s");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  std::vector<int> world, nodes;
  for (int r = 0; r < bootstrap.size(); ++r) {
    world.push_back(bootstrap.worldRank(r));
    nodes.push_back(bootstrap.node(r));
  }
  CommunicatorOptions options;
  options.timeoutSeconds = bootstrap.timeoutSeconds();
  return std::make_unique<NcclCommunicator>(comm, static_cast<cudaStream_t>(cudaStream), bootstrap.rank(),
                                            std::move(world), std::move(nodes), options,
                                            std::make_shared<TrafficStats>(bootstrap.size()));
}

}  // namespace gradcomp
