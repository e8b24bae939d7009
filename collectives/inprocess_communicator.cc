#include "collectives/inprocess_communicator.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace gradcomp {
namespace {

uint64_t mixContext(uint64_t parent, uint64_t splitIndex, int color) {
  uint64_t h = parent ^ 0x9E3779B97F4A7C15ull;
  for (uint64_t v : {splitIndex, static_cast<uint64_t>(color)}) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
  }
  return h;
}

struct SendState : Request::State {
  Clock::time_point leaves;
  size_t bytes = 0;
};
struct RecvState : Request::State {
  InProcessWorld::ChannelKey key;
  uint64_t index = 0;
  std::span<std::byte> buffer;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessWorld> world, uint64_t context, int rank, std::vector<int> worldRanks,
                        std::vector<int> nodes, CommunicatorOptions options, std::shared_ptr<TrafficStats> traffic)
      : Communicator("in-process", rank, std::move(worldRanks), std::move(nodes), options, std::move(traffic)),
        world_(std::move(world)),
        context_(context) {}

  Request isend(std::span<const std::byte> data, int peer, Tag tag) override {
    checkPeer(peer);
    auto s = std::make_shared<SendState>();
    s->leaves = world_->send({context_, worldRank(rank_), worldRank(peer), tag}, data, linkClass(peer));
    s->bytes = data.size();
    countSend(peer, data.size());
    return Request(s, peer, false, tag);
  }

  Request irecv(std::span<std::byte> buffer, int peer, Tag tag) override {
    checkPeer(peer);
    auto s = std::make_shared<RecvState>();
    s->key = {context_, worldRank(peer), worldRank(rank_), tag};
    s->index = world_->postReceive(s->key);
    s->buffer = buffer;
    return Request(s, peer, true, tag);
  }

  size_t wait(Request& r, Deadline d, const char* what) override {
    GRADCOMP_CHECK_ARG(r.valid(), "wait on an empty request (", what, ")");
    if (!r.isRecv()) {
      auto& s = r.as<SendState>();
      if (!s.done) {
        if (s.leaves > d.at) {
          std::this_thread::sleep_until(d.at);
          throwTimeout(r, what);
        }
        std::this_thread::sleep_until(s.leaves);
        s.done = true;
      }
      return s.bytes;
    }
    auto& s = r.as<RecvState>();
    GRADCOMP_CHECK_ARG(!s.done, "request waited twice (", what, ")");
    InProcessWorld::Message m;
    try {
      if (!world_->takeMessage(s.key, s.index, d, m)) throwTimeout(r, what);
    } catch (const PeerFailure& e) {
      GRADCOMP_THROW(PeerFailure, "in-process rank ", rank_, ": ", what, ": peer rank ", r.peer(), " (world rank ",
                     worldRank(r.peer()), ") failed: ", e.what());
    }
    if (m.arrival > d.at) {
      std::this_thread::sleep_until(d.at);
      throwTimeout(r, what);
    }
    std::this_thread::sleep_until(m.arrival);
    if (m.data.size() > s.buffer.size())
      GRADCOMP_THROW(TransportError, "in-process rank ", rank_, ": ", what, ": rank ", r.peer(), " sent ",
                     m.data.size(), " bytes into a receive buffer of ", s.buffer.size());
    if (!m.data.empty()) std::memcpy(s.buffer.data(), m.data.data(), m.data.size());
    const size_t bytes = m.data.size();
    countReceive(r.peer(), bytes);
    s.done = true;
    world_->recycle(std::move(m.data));
    return bytes;
  }

 protected:
  std::unique_ptr<Communicator> makeChild(const std::vector<int>& members, int newRank, int color, int) override {
    std::vector<int> world, nodes;
    for (int m : members) {
      world.push_back(worldRank(m));
      nodes.push_back(node(m));
    }
    return std::make_unique<InProcessCommunicator>(world_, mixContext(context_, splits_++, color), newRank,
                                                   std::move(world), std::move(nodes), options_, traffic_);
  }

 private:
  void checkPeer(int peer) const {
    GRADCOMP_CHECK_ARG(peer >= 0 && peer < size() && peer != rank_, "in-process rank ", rank_, ": peer ", peer,
                       " is not another rank of this communicator of size ", size());
  }

  std::shared_ptr<InProcessWorld> world_;
  uint64_t context_;
  uint64_t splits_ = 0;
};

}  // namespace

InProcessWorld::InProcessWorld(int size, CommunicatorOptions options, LinkModel links)
    : size_(size), options_(options), links_(links), failed_(static_cast<size_t>(std::max(size, 0))) {
  GRADCOMP_CHECK_ARG(size >= 1, "in-process world size must be >= 1, got ", size);
  arrived_ = std::vector<std::condition_variable>(static_cast<size_t>(size));
  GRADCOMP_CHECK_ARG(options.ranksPerNode >= 0, "ranks per node must be >= 0, got ", options.ranksPerNode);
  GRADCOMP_CHECK_ARG(options.timeoutSeconds > 0, "communicator timeout must be positive, got ", options.timeoutSeconds,
                     " s");
  const int rpn = options.ranksPerNode > 0 ? options.ranksPerNode : size;
  for (int r = 0; r < size; ++r) nodes_.push_back(r / rpn);
  for (int c = 0; c < 2; ++c) {
    egressFree_[c].assign(static_cast<size_t>(size), Clock::time_point{});
    ingressFree_[c].assign(static_cast<size_t>(size), Clock::time_point{});
  }
}

std::shared_ptr<InProcessWorld> InProcessWorld::create(int size, CommunicatorOptions options, LinkModel links) {
  return std::shared_ptr<InProcessWorld>(new InProcessWorld(size, options, links));
}

std::unique_ptr<Communicator> InProcessWorld::communicator(int rank) {
  GRADCOMP_CHECK_ARG(rank >= 0 && rank < size_, "rank ", rank, " outside the world of ", size_);
  std::vector<int> world(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) world[static_cast<size_t>(r)] = r;
  return std::make_unique<InProcessCommunicator>(shared_from_this(), 0, rank, std::move(world), nodes_, options_,
                                                 std::make_shared<TrafficStats>(size_));
}

void InProcessWorld::markFailed(int worldRank, const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    failed_.at(static_cast<size_t>(worldRank)) = reason.empty() ? "failed" : reason;
  }
  for (auto& cv : arrived_) cv.notify_all();
}

Clock::time_point InProcessWorld::send(const ChannelKey& key, std::span<const std::byte> data, LinkClass cls) {
  Message m;
  {
    std::lock_guard lock(mutex_);
    // Best fit from the pool: the smallest buffer that holds the message.
    auto best = pool_.end();
    for (auto it = pool_.begin(); it != pool_.end(); ++it)
      if (it->capacity() >= data.size() && (best == pool_.end() || it->capacity() < best->capacity())) best = it;
    if (best != pool_.end()) {
      m.data = std::move(*best);
      pool_.erase(best);
    }
  }
  m.data.resize(data.size());
  if (!data.empty()) std::memcpy(m.data.data(), data.data(), data.size());
  const auto now = Clock::now();
  Clock::time_point leaves = now;
  {
    std::lock_guard lock(mutex_);
    const LinkSpec& link = links_[cls];
    if (link.active()) {
      const int c = static_cast<int>(cls);
      auto& out = egressFree_[c][static_cast<size_t>(key.src)];
      auto& in = ingressFree_[c][static_cast<size_t>(key.dst)];
      const auto start = std::max({now, out, in});
      const double busy = link.bytesPerSecond > 0 ? static_cast<double>(data.size()) / link.bytesPerSecond : 0.0;
      leaves = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(busy));
      out = in = leaves;
      m.arrival = leaves + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(link.latencySeconds));
    } else {
      m.arrival = now;
    }
    Channel& ch = channels_[key];
    ch.messages.emplace(ch.sent++, std::move(m));
  }
  arrived_[static_cast<size_t>(key.dst)].notify_all();
  return leaves;
}

void InProcessWorld::recycle(std::vector<std::byte>&& buffer) {
  if (buffer.capacity() < 4096) return;
  std::lock_guard lock(mutex_);
  if (pool_.size() >= kPoolBuffers) {
    // Keep the larger buffers: drop the smallest.
    auto smallest = std::min_element(pool_.begin(), pool_.end(),
                                     [](const auto& a, const auto& b) { return a.capacity() < b.capacity(); });
    if (smallest->capacity() >= buffer.capacity()) return;
    *smallest = std::move(buffer);
    return;
  }
  pool_.push_back(std::move(buffer));
}

uint64_t InProcessWorld::postReceive(const ChannelKey& key) {
  std::lock_guard lock(mutex_);
  return channels_[key].posted++;
}

bool InProcessWorld::takeMessage(const ChannelKey& key, uint64_t index, Deadline d, Message& out) {
  std::unique_lock lock(mutex_);
  Channel& ch = channels_[key];
  for (;;) {
    auto it = ch.messages.find(index);
    if (it != ch.messages.end()) {
      out = std::move(it->second);
      ch.messages.erase(it);
      // Every posted receive has its message: the channel is back to its initial state.
      if (ch.messages.empty() && ch.posted == ch.sent) channels_.erase(key);
      return true;
    }
    const std::string& failure = failed_[static_cast<size_t>(key.src)];
    if (!failure.empty()) GRADCOMP_THROW(PeerFailure, failure);
    if (arrived_[static_cast<size_t>(key.dst)].wait_until(lock, d.at) == std::cv_status::timeout && ch.messages.find(index) == ch.messages.end())
      return false;
  }
}

std::vector<std::exception_ptr> runInProcess(int size, const std::function<void(Communicator&)>& fn,
                                             CommunicatorOptions options, LinkModel links) {
  auto world = InProcessWorld::create(size, options, links);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < size; ++r) comms.push_back(world->communicator(r));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*comms[static_cast<size_t>(r)]);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        world->markFailed(r, e.what());
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        world->markFailed(r, "unknown exception");
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace gradcomp
