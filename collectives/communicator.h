// The transport interface every algorithm is written against: nonblocking byte point-to-point with a
// deadline on every wait, sub-communicators, and traffic accounting per peer and per link class.
//
// Contract:
//  * isend/irecv never block; wait() blocks until the request completes or the deadline passes, and
//    then throws TimeoutError naming the peer and what was awaited. It never hangs.
//  * Messages between one (sender, receiver, tag) are matched in posting order (MPI's rule).
//  * A recv buffer may be larger than the message; wait() returns the bytes actually received. A larger
//    message is a TransportError (never a silent truncation).
//  * After any exception from a communicator it is dead: make a new one (MPI has no repair without ULFM).
//  * Traffic is counted here, at the transport, by world rank and link class, so a caller sees what
//    every algorithm really put on each link.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace gradcomp {

using Clock = std::chrono::steady_clock;

struct Deadline {
  Clock::time_point at;
  static Deadline after(double seconds) {
    return {Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))};
  }
  bool passed() const { return Clock::now() >= at; }
};

enum class LinkClass : int { Intra = 0, Inter = 1 };
const char* linkClassName(LinkClass c);

// Tags carry the operation's sequence number and a phase, so a rank that runs operations in another
// order than its peers never matches a wrong message: it times out naming the sequence number.
using Tag = uint32_t;
inline constexpr int kTagPhaseBits = 8;
inline constexpr uint32_t kTagSequenceMask = 0xFFFF;
inline Tag makeTag(uint64_t sequence, uint32_t phase) {
  return static_cast<Tag>(((sequence & kTagSequenceMask) << kTagPhaseBits) | (phase & 0xFF));
}

// Bytes and messages by world rank and link class. Shared by a communicator and every communicator
// split from it, so the root sees all the traffic of all its sub-communicators.
class TrafficStats {
 public:
  explicit TrafficStats(int worldSize = 0)
      : sentTo_(static_cast<size_t>(worldSize)), receivedFrom_(static_cast<size_t>(worldSize)) {}
  void recordSend(int worldPeer, LinkClass c, uint64_t bytes);
  void recordReceive(int worldPeer, LinkClass c, uint64_t bytes);

  uint64_t bytesSentTo(int worldPeer) const { return sentTo_.at(static_cast<size_t>(worldPeer)); }
  uint64_t bytesReceivedFrom(int worldPeer) const { return receivedFrom_.at(static_cast<size_t>(worldPeer)); }
  uint64_t bytesSent(LinkClass c) const { return sent_[static_cast<int>(c)]; }
  uint64_t bytesReceived(LinkClass c) const { return received_[static_cast<int>(c)]; }
  uint64_t totalBytesSent() const { return sent_[0] + sent_[1]; }
  uint64_t totalBytesReceived() const { return received_[0] + received_[1]; }
  uint64_t messagesSent() const { return messagesSent_; }
  void reset();

  // Counting is suspended while a check-mode reference all-reduce runs (its bytes are not the op's).
  void setCounting(bool on) { counting_ = on; }
  bool counting() const { return counting_; }

 private:
  std::vector<uint64_t> sentTo_, receivedFrom_;
  uint64_t sent_[2] = {0, 0}, received_[2] = {0, 0};
  uint64_t messagesSent_ = 0;
  bool counting_ = true;
};

// A posted isend or irecv. Opaque; the transport keeps its state.
class Request {
 public:
  struct State {
    virtual ~State() = default;
    bool done = false;
  };
  Request() = default;
  explicit Request(std::shared_ptr<State> s, int peer, bool isRecv, Tag tag)
      : state_(std::move(s)), peer_(peer), isRecv_(isRecv), tag_(tag) {}
  bool valid() const { return state_ != nullptr; }
  bool done() const { return !state_ || state_->done; }
  int peer() const { return peer_; }
  bool isRecv() const { return isRecv_; }
  Tag tag() const { return tag_; }
  State* state() const { return state_.get(); }
  template <typename T>
  T& as() const { return static_cast<T&>(*state_); }

 private:
  std::shared_ptr<State> state_;
  int peer_ = -1;
  bool isRecv_ = false;
  Tag tag_ = 0;
};

struct CommunicatorOptions {
  double timeoutSeconds = 60.0;  // deadline of each wait inside a collective
  int ranksPerNode = 0;          // 0: discover (MPI: shared-memory domain; in-process: one node)
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(worldRanks_.size()); }
  int worldRank(int r) const { return worldRanks_.at(static_cast<size_t>(r)); }
  int node(int r) const { return nodes_.at(static_cast<size_t>(r)); }  // node id of rank r
  LinkClass linkClass(int peer) const { return node(peer) == node(rank_) ? LinkClass::Intra : LinkClass::Inter; }
  int numNodes() const;
  // Ranks per node when every node has the same number, else 0.
  int uniformRanksPerNode() const;
  const std::string& transportName() const { return transport_; }
  // Unique per communicator object in this process (caches of sub-communicators key on it).
  uint64_t id() const { return id_; }

  double timeoutSeconds() const { return options_.timeoutSeconds; }
  void setTimeoutSeconds(double s);
  Deadline deadline() const { return Deadline::after(options_.timeoutSeconds); }

  // One operation at a time. Every operation on a communicator (a collective, a split, a small exchange)
  // holds an OperationScope for its duration; the scope numbers it (the same number on every rank that
  // runs the same operations in the same order: tags and the agreement check carry it). Ranks number
  // operations in the order their threads arrive, and that order differs between ranks, so two threads
  // running operations on one communicator at once would pair one tensor's messages with another's and
  // sum them crosswise. A second thread that starts an operation while another thread's is running gets
  // ConcurrentUse at once, naming both; one thread handing the communicator to another between
  // operations (the gradient reducer's communication thread, then the trainer) is fine. For concurrent
  // streams of operations, split() a communicator per thread. Scopes nest on the thread that holds one.
  class OperationScope {
   public:
    OperationScope(Communicator& comm, const char* operation);
    ~OperationScope();
    OperationScope(const OperationScope&) = delete;
    OperationScope& operator=(const OperationScope&) = delete;
    uint64_t sequence() const { return sequence_; }

   private:
    Communicator& comm_;
    uint64_t sequence_;
  };

  virtual Request isend(std::span<const std::byte> data, int peer, Tag tag) = 0;
  virtual Request irecv(std::span<std::byte> buffer, int peer, Tag tag) = 0;
  // Returns the bytes transferred. `what` names the operation for the error message.
  virtual size_t wait(Request& r, Deadline d, const char* what) = 0;
  // Sends and receives posted between groupStart and groupEnd are issued together (NCCL needs this to
  // avoid a cyclic wait in a ring; CPU transports ignore it).
  virtual void groupStart() {}
  virtual void groupEnd() {}

  // Ranks with the same color form a sub-communicator, ordered by (key, rank). Collective, with the
  // deadline. Traffic of the child is counted in this communicator's TrafficStats.
  std::unique_ptr<Communicator> split(int color, int key);

  // Vendor fp32 sum all-reduce (MPI_Iallreduce / ncclAllReduce), polled against the deadline. Throws
  // BackendUnavailable where the transport has none (in-process).
  // blocking=true calls the blocking MPI_Allreduce instead (no deadline: a benchmark baseline only,
  // because Open MPI's nonblocking all-reduce is a different, often slower, implementation).
  virtual void vendorAllreduceSum(std::span<float> data, Deadline d, uint64_t sequence, bool blocking = false);
  // Whether buffers given to isend/irecv may live on the GPU (NCCL).
  virtual bool deviceBuffers() const { return false; }

  const TrafficStats& traffic() const { return *traffic_; }
  TrafficStats& traffic() { return *traffic_; }

 protected:
  Communicator(std::string transport, int rank, std::vector<int> worldRanks, std::vector<int> nodes,
               CommunicatorOptions options, std::shared_ptr<TrafficStats> traffic);
  // Builds the child for split(): members are the parent ranks in the new order.
  virtual std::unique_ptr<Communicator> makeChild(const std::vector<int>& members, int newRank, int color,
                                                  int key) = 0;

  void countSend(int peer, size_t bytes);
  void countReceive(int peer, size_t bytes);
  [[noreturn]] void throwTimeout(const Request& r, const char* what) const;

  std::string transport_;
  int rank_;
  std::vector<int> worldRanks_;  // world rank of each rank of this communicator
  std::vector<int> nodes_;       // node id of each rank of this communicator
  CommunicatorOptions options_;
  std::shared_ptr<TrafficStats> traffic_;
  uint64_t sequence_ = 0;
  uint64_t id_;

 private:
  // The thread running an operation (default id: none), how deeply its scopes nest (touched by that
  // thread only), and the outermost operation's name for the other thread's error.
  std::atomic<std::thread::id> owner_{};
  int scopeDepth_ = 0;
  std::atomic<const char*> currentOperation_{nullptr};
};

// Waits for every valid request in order (each with the same deadline).
void waitAll(Communicator& comm, std::span<Request> requests, Deadline d, const char* what);

}  // namespace gradcomp
