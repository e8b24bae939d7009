// Ranks as threads of one process: the transport of the tests and the embedded default.
//
// isend copies the message into the world's mailbox (eager, like MPI's buffered protocol), so a send
// never waits for the receiver. With an active LinkModel, delivery is paced: each rank has one egress
// and one ingress per link class; a message starts when both are free, occupies them for
// bytes / bandwidth, and arrives `latency` later. A send completes when its bytes have left, a receive
// when they have arrived, so algorithms see the wall time of the modelled network.
// A rank whose function throws is marked failed: its peers' waits on it fail at once with PeerFailure.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/link_model.h"

namespace gradcomp {

class InProcessWorld : public std::enable_shared_from_this<InProcessWorld> {
 public:
  static std::shared_ptr<InProcessWorld> create(int size, CommunicatorOptions options = {}, LinkModel links = {});

  int size() const { return size_; }
  // The communicator of one rank; call once per rank and use it from that rank's thread only.
  std::unique_ptr<Communicator> communicator(int rank);
  // Peers waiting on this rank fail with PeerFailure(reason) instead of waiting for the deadline.
  void markFailed(int worldRank, const std::string& reason);

  // Internal to the transport.
  struct Message {
    std::vector<std::byte> data;
    Clock::time_point arrival;
  };
  struct ChannelKey {
    uint64_t context;
    int src, dst;
    Tag tag;
    auto operator<=>(const ChannelKey&) const = default;
  };
  struct Channel {
    uint64_t posted = 0, sent = 0;  // receives posted / messages sent so far: the i-th matches the i-th
    std::map<uint64_t, Message> messages;
  };
  Clock::time_point send(const ChannelKey& key, std::span<const std::byte> data, LinkClass cls);
  uint64_t postReceive(const ChannelKey& key);
  // Waits for message `index` of the channel until the deadline; returns false on timeout.
  bool takeMessage(const ChannelKey& key, uint64_t index, Deadline d, Message& out);
  // Gives a delivered message's buffer back for reuse: large fresh allocations cost page faults and
  // zeroing on every message, which showed as 12 % of an in-process compressed all-reduce.
  void recycle(std::vector<std::byte>&& buffer);

 private:
  InProcessWorld(int size, CommunicatorOptions options, LinkModel links);

  int size_;
  CommunicatorOptions options_;
  LinkModel links_;
  std::vector<int> nodes_;
  std::shared_ptr<TrafficStats> unusedTraffic_;
  std::mutex mutex_;
  std::vector<std::condition_variable> arrived_;  // one per destination rank: a send wakes only its receiver
  std::map<ChannelKey, Channel> channels_;
  std::vector<Clock::time_point> egressFree_[2], ingressFree_[2];
  std::vector<std::string> failed_;  // non-empty: the rank's failure reason
  std::vector<std::vector<std::byte>> pool_;
  static constexpr size_t kPoolBuffers = 64;
};

// Runs fn(comm) on `size` threads, one per rank. Returns each rank's exception (null if it returned).
std::vector<std::exception_ptr> runInProcess(int size, const std::function<void(Communicator&)>& fn,
                                             CommunicatorOptions options = {}, LinkModel links = {});

}  // namespace gradcomp
