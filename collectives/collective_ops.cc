#include "collectives/collective_ops.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "collectives/agreement.h"
#include "collectives/ring_primitives.h"
#include "core/error.h"

namespace gradcomp {

CollectiveOps::CollectiveOps(CollectiveConfig config)
    : config_(std::move(config)), payload_(config_.codec, config_.errorFeedback) {
  GRADCOMP_CHECK_ARG(config_.chunkBytes >= sizeof(float), "chunk size must be at least 4 bytes");
  const std::string& ef = payload_.errorFeedback().name();
  GRADCOMP_CHECK_ARG(ef == "none" || ef == "ef", "collective operations take error feedback none or ef, got '", ef,
                     "' (ef21 and dgc belong to the all-reduce of gradients)");
}

std::string CollectiveOps::describe() const {
  std::ostringstream o;
  o << "codec=" << payload_.canonicalCodecSpec() << " ef=" << payload_.canonicalErrorFeedbackSpec() << ' '
    << reduceOpName(config_.op) << " seed=" << config_.seed << " chunk=" << config_.chunkBytes;
  return o.str();
}

uint64_t CollectiveOps::begin(const Communicator::OperationScope& scope, const char* operation, uint64_t count,
                              int64_t root, Communicator& comm, std::span<const float> input, const AllreduceCall& call) {
  OpDescriptor op;
  op.operation = operation;
  op.sequence = scope.sequence();
  op.count = count;
  op.root = root;
  op.tensorId = call.tensorId;
  op.step = call.step;
  op.config = describe();
  if (!payload_.raw()) {
    const uint64_t bad = firstNonFinite(input);
    if (bad != EncodeResult::kNoIndex) op.nonFiniteIndex = bad;
  }
  const NonFiniteInput bad = agreeOnOperation(comm, op);
  if (bad.rank >= 0)
    throw NonFiniteError(__FILE__, __LINE__,
                         detail::concat(operation, " #", op.sequence, ": rank ", bad.rank,
                                        " has a non-finite value at index ", bad.index, " (seen by rank ",
                                        comm.rank(), ")"),
                         0, bad.index);
  return op.sequence;
}

CollectiveReport CollectiveOps::finish(uint64_t sequence, uint64_t bytes0, const CodecCost& cost0,
                                       const Communicator& comm) {
  CollectiveReport r;
  r.sequence = sequence;
  r.bytesSent = comm.traffic().totalBytesSent() - bytes0;
  const CodecCost& c = payload_.cost();
  r.cost = {c.encodeSeconds - cost0.encodeSeconds, c.decodeSeconds - cost0.decodeSeconds,
            c.saturated - cost0.saturated, c.skipped - cost0.skipped, c.encodes - cost0.encodes};
  return r;
}

CollectiveReport CollectiveOps::reduceScatter(std::span<const float> input, std::span<float> output,
                                              Communicator& comm, const AllreduceCall& call) {
  const Communicator::OperationScope scope(comm, "reduce-scatter");
  const Segments seg{input.size(), static_cast<size_t>(comm.size())};
  const size_t mine = static_cast<size_t>(comm.rank());
  GRADCOMP_CHECK_EQ(output.size(), seg.size(mine), "reduce-scatter of ", input.size(), " elements over ",
                    comm.size(), " ranks: rank ", comm.rank(), "'s output must hold its segment");
  if (!payload_.raw())
    GRADCOMP_CHECK_ARG(payload_.codec().traits().reencodable, "reduce-scatter cannot carry codec '",
                       payload_.codecSpec(), "': it re-encodes partial sums per hop");
  const uint64_t bytes0 = comm.traffic().totalBytesSent();
  const CodecCost cost0 = payload_.cost();
  const uint64_t seq = begin(scope, "reduce-scatter", input.size(), -1, comm, input, call);
  std::vector<float> work(input.begin(), input.end());
  const RingContext rc{comm, seq, 1, call.tensorId, call.step, config_.seed, &scratch_};
  if (payload_.raw())
    ringReduceScatterRaw(rc, work, config_.chunkBytes);
  else
    ringReduceScatterCoded(rc, work, payload_, config_.chunkBytes);
  std::copy_n(work.begin() + static_cast<ptrdiff_t>(seg.begin(mine)), output.size(), output.begin());
  if (config_.op == ReduceOp::Average)
    for (float& v : output) v /= static_cast<float>(comm.size());
  return finish(seq, bytes0, cost0, comm);
}

CollectiveReport CollectiveOps::allGather(std::span<const float> mine, std::span<float> output, Communicator& comm,
                                          const AllreduceCall& call) {
  const Communicator::OperationScope scope(comm, "all-gather");
  const size_t m = mine.size(), p = static_cast<size_t>(comm.size()), r = static_cast<size_t>(comm.rank());
  GRADCOMP_CHECK_EQ(output.size(), m * p, "all-gather: the output holds one block of ", m, " per rank");
  const uint64_t bytes0 = comm.traffic().totalBytesSent();
  const CodecCost cost0 = payload_.cost();
  const uint64_t seq = begin(scope, "all-gather", m, -1, comm, mine, call);
  std::copy(mine.begin(), mine.end(), output.begin() + static_cast<ptrdiff_t>(r * m));
  const RingContext rc{comm, seq, 1, call.tensorId, call.step, config_.seed, &scratch_};
  if (payload_.raw())
    ringAllgatherRaw(rc, output, config_.chunkBytes);
  else
    ringAllgatherCoded(rc, output, payload_, config_.chunkBytes);
  return finish(seq, bytes0, cost0, comm);
}

CollectiveReport CollectiveOps::broadcast(std::span<float> data, int root, Communicator& comm,
                                          const AllreduceCall& call) {
  const Communicator::OperationScope scope(comm, "broadcast");
  const int p = comm.size(), r = comm.rank();
  GRADCOMP_CHECK_ARG(root >= 0 && root < p, "broadcast root ", root, " outside [0, ", p, ")");
  const uint64_t bytes0 = comm.traffic().totalBytesSent();
  const CodecCost cost0 = payload_.cost();
  const uint64_t seq = begin(scope, "broadcast", data.size(), root, comm,
                             r == root ? std::span<const float>(data) : std::span<const float>(), call);
  const Tag tag = makeTag(seq, 1);
  const int vr = (r - root + p) % p;
  auto real = [&](int v) { return (v + root) % p; };
  const EncodeContext ctx{config_.seed, static_cast<uint32_t>(root), call.step, segmentKey(call.tensorId, 0), 0};
  WireBuffer buf;
  const auto wire = buf.span(payload_.raw() ? 0 : payload_.maxBytes(data.size(), ctx));
  const std::span<std::byte> message = payload_.raw() ? std::as_writable_bytes(data) : wire;
  size_t bytes = payload_.raw() ? data.size_bytes() : 0;
  if (vr == 0 && !payload_.raw()) bytes = payload_.encode(data, wire, ctx);
  int mask = 1;
  while (mask < p) {  // receive from the parent: the rank that differs in my lowest set bit
    if (vr & mask) {
      Request q = comm.irecv(message, real(vr - mask), tag);
      bytes = comm.wait(q, comm.deadline(), "broadcast");
      break;
    }
    mask <<= 1;
  }
  std::vector<Request> sends;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < p) sends.push_back(comm.isend(message.first(bytes), real(vr + mask), tag));
  waitAll(comm, sends, comm.deadline(), "broadcast");
  if (payload_.raw()) {
    if (bytes != data.size_bytes())
      GRADCOMP_THROW(TransportError, "broadcast: received ", bytes, " bytes, expected ", data.size_bytes());
  } else {
    payload_.decode(wire.first(bytes), data, DecodeMode::Overwrite);
  }
  return finish(seq, bytes0, cost0, comm);
}

CollectiveReport CollectiveOps::allToAll(std::span<const float> input, std::span<float> output, Communicator& comm,
                                         const AllreduceCall& call) {
  const Communicator::OperationScope scope(comm, "all-to-all");
  const int p = comm.size(), r = comm.rank();
  GRADCOMP_CHECK_ARG(input.size() % static_cast<size_t>(p) == 0, "all-to-all: ", input.size(),
                     " elements do not split into ", p, " equal blocks");
  GRADCOMP_CHECK_EQ(output.size(), input.size(), "all-to-all: output and input sizes");
  const size_t m = input.size() / static_cast<size_t>(p);
  const uint64_t bytes0 = comm.traffic().totalBytesSent();
  const CodecCost cost0 = payload_.cost();
  const uint64_t seq = begin(scope, "all-to-all", input.size(), -1, comm, input, call);
  const Tag tag = makeTag(seq, 1);
  auto block = [&](auto span, int q) { return span.subspan(static_cast<size_t>(q) * m, m); };
  std::copy_n(block(input, r).begin(), m, block(output, r).begin());
  WireBuffer sendBuf, recvBuf;
  for (int s = 1; s < p; ++s) {
    const int to = (r + s) % p, from = (r - s + p) % p;
    const Deadline d = comm.deadline();
    if (payload_.raw()) {
      comm.groupStart();
      Request q = comm.irecv(std::as_writable_bytes(block(output, from)), from, tag);
      Request t = comm.isend(std::as_bytes(block(input, to)), to, tag);
      comm.groupEnd();
      const size_t got = comm.wait(q, d, "all-to-all");
      comm.wait(t, d, "all-to-all");
      if (got != m * sizeof(float))
        GRADCOMP_THROW(TransportError, "all-to-all: rank ", from, " sent ", got, " bytes, expected ", m * sizeof(float));
      continue;
    }
    const EncodeContext ctx{config_.seed, static_cast<uint32_t>(r), call.step,
                            segmentKey(call.tensorId, static_cast<size_t>(to)), 0};
    const auto recvWire = recvBuf.span(payload_.maxBytes(m, ctx));
    Request q = comm.irecv(recvWire, from, tag);
    const auto sendWire = sendBuf.span(payload_.maxBytes(m, ctx));
    Request t = comm.isend(sendWire.first(payload_.encode(block(input, to), sendWire, ctx)), to, tag);
    const size_t got = comm.wait(q, d, "all-to-all");
    payload_.decode(recvWire.first(got), block(output, from), DecodeMode::Overwrite);
    comm.wait(t, d, "all-to-all");
  }
  return finish(seq, bytes0, cost0, comm);
}

}  // namespace gradcomp
