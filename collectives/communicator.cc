#include "collectives/communicator.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include "collectives/small_collectives.h"
#include "core/error.h"

namespace gradcomp {

const char* linkClassName(LinkClass c) { return c == LinkClass::Intra ? "intra" : "inter"; }

void TrafficStats::recordSend(int worldPeer, LinkClass c, uint64_t bytes) {
  if (!counting_) return;
  sentTo_.at(static_cast<size_t>(worldPeer)) += bytes;
  sent_[static_cast<int>(c)] += bytes;
  ++messagesSent_;
}

void TrafficStats::recordReceive(int worldPeer, LinkClass c, uint64_t bytes) {
  if (!counting_) return;
  receivedFrom_.at(static_cast<size_t>(worldPeer)) += bytes;
  received_[static_cast<int>(c)] += bytes;
}

void TrafficStats::reset() {
  std::fill(sentTo_.begin(), sentTo_.end(), 0);
  std::fill(receivedFrom_.begin(), receivedFrom_.end(), 0);
  sent_[0] = sent_[1] = received_[0] = received_[1] = 0;
  messagesSent_ = 0;
}

Communicator::Communicator(std::string transport, int rank, std::vector<int> worldRanks, std::vector<int> nodes,
                           CommunicatorOptions options, std::shared_ptr<TrafficStats> traffic)
    : transport_(std::move(transport)),
      rank_(rank),
      worldRanks_(std::move(worldRanks)),
      nodes_(std::move(nodes)),
      options_(options),
      traffic_(std::move(traffic)) {
  static std::atomic<uint64_t> nextId{1};
  id_ = nextId++;
  GRADCOMP_CHECK_ARG(options_.timeoutSeconds > 0, "communicator timeout must be positive, got ",
                     options_.timeoutSeconds, " s");
  GRADCOMP_CHECK_ARG(options_.ranksPerNode >= 0, "ranks per node must be >= 0, got ", options_.ranksPerNode);
  GRADCOMP_CHECK_EQ(worldRanks_.size(), nodes_.size(), "one node id per rank");
  GRADCOMP_CHECK_ARG(rank_ >= 0 && rank_ < size(), "rank ", rank_, " outside [0, ", size(), ")");
}

void Communicator::setTimeoutSeconds(double s) {
  GRADCOMP_CHECK_ARG(s > 0, "communicator timeout must be positive, got ", s, " s");
  options_.timeoutSeconds = s;
}

int Communicator::numNodes() const { return static_cast<int>(std::set<int>(nodes_.begin(), nodes_.end()).size()); }

int Communicator::uniformRanksPerNode() const {
  std::map<int, int> count;
  for (int n : nodes_) ++count[n];
  const int first = count.begin()->second;
  for (const auto& [n, c] : count)
    if (c != first) return 0;
  return first;
}

void Communicator::countSend(int peer, size_t bytes) { traffic_->recordSend(worldRank(peer), linkClass(peer), bytes); }
void Communicator::countReceive(int peer, size_t bytes) {
  traffic_->recordReceive(worldRank(peer), linkClass(peer), bytes);
}

void Communicator::throwTimeout(const Request& r, const char* what) const {
  GRADCOMP_THROW(TimeoutError, transport_, " rank ", rank_, ": ", what, ": no ", r.isRecv() ? "message from" : "delivery to",
                 " rank ", r.peer(), " (world rank ", worldRank(r.peer()), ") within the ", options_.timeoutSeconds,
                 " s deadline (operation #", (r.tag() >> kTagPhaseBits), ", phase ", (r.tag() & 0xFF),
                 "); the peer is dead, stopped, slow, or running a different operation");
}

Communicator::OperationScope::OperationScope(Communicator& comm, const char* operation) : comm_(comm) {
  const std::thread::id me = std::this_thread::get_id();
  std::thread::id expected{};
  if (!comm.owner_.compare_exchange_strong(expected, me) && expected != me) {
    const char* running = comm.currentOperation_.load();
    GRADCOMP_THROW(ConcurrentUse, comm.transport_, " rank ", comm.rank_, ": ", operation,
                   " started while another thread is running ", running ? running : "an operation",
                   " on the same communicator. Ranks number operations in the order their threads arrive, which "
                   "differs between ranks, so this would pair one tensor's messages with another's; use one "
                   "communicator per thread (split() one for each) or run the operations one after another");
  }
  if (comm.scopeDepth_++ == 0) comm.currentOperation_.store(operation);
  sequence_ = comm.sequence_++;
}

Communicator::OperationScope::~OperationScope() {
  if (--comm_.scopeDepth_ == 0) {
    comm_.currentOperation_.store(nullptr);
    comm_.owner_.store(std::thread::id{});
  }
}

void Communicator::vendorAllreduceSum(std::span<float>, Deadline, uint64_t, bool) {
  GRADCOMP_THROW(BackendUnavailable, "the ", transport_,
                 " communicator has no vendor all-reduce (algorithm 'vendor' needs the MPI or NCCL transport)");
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  GRADCOMP_CHECK_ARG(color >= 0, "split color must be >= 0, got ", color);
  const OperationScope scope(*this, "split");
  const uint64_t seq = scope.sequence();
  int32_t mine[2] = {color, key};
  const auto all = allgatherSmall(*this, std::as_bytes(std::span(mine)), makeTag(seq, 0xFE), "split");
  std::vector<std::pair<int, int>> members;  // (key, parent rank) of my color
  for (int r = 0; r < size(); ++r) {
    int32_t ck[2];
    std::memcpy(ck, all.data() + static_cast<size_t>(r) * sizeof(ck), sizeof(ck));
    if (ck[0] == color) members.emplace_back(ck[1], r);
  }
  std::sort(members.begin(), members.end());
  std::vector<int> order;
  int newRank = -1;
  for (const auto& [k, r] : members) {
    if (r == rank_) newRank = static_cast<int>(order.size());
    order.push_back(r);
  }
  auto child = makeChild(order, newRank, color, key);
  child->sequence_ = 0;
  return child;
}

void waitAll(Communicator& comm, std::span<Request> requests, Deadline d, const char* what) {
  for (auto& r : requests)
    if (r.valid()) comm.wait(r, d, what);
}

}  // namespace gradcomp
