#include "collectives/ring_primitives.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace gradcomp {
namespace {

std::span<std::byte> bytesOf(std::span<float> x) { return std::as_writable_bytes(x); }

int rightOf(const Communicator& c) { return (c.rank() + 1) % c.size(); }
int leftOf(const Communicator& c) { return (c.rank() + c.size() - 1) % c.size(); }

void addInto(float* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

// The caller's scratch, or a temporary one for this call.
struct ScratchRef {
  RingScratch local;
  RingScratch& ref;
  explicit ScratchRef(RingScratch* s) : ref(s ? *s : local) {}
};

void expectBytes(size_t got, size_t want, const Communicator& c, const char* what) {
  if (got != want)
    GRADCOMP_THROW(TransportError, what, ": rank ", leftOf(c), " sent ", got, " bytes, expected ", want,
                   " (ranks disagree on the segment sizes)");
}

}  // namespace

namespace {
// Chunks of one segment: balanced, at most chunkElems each, at least one (possibly empty).
Segments chunksOf(size_t segmentSize, size_t chunkElems) {
  return {segmentSize, std::max<size_t>(1, (segmentSize + chunkElems - 1) / chunkElems)};
}
size_t chunkElements(size_t chunkBytes) { return std::max<size_t>(1, chunkBytes / sizeof(float)); }
}  // namespace

void ringReduceScatterRaw(const RingContext& rc, std::span<float> data, size_t chunkBytes) {
  Communicator& comm = rc.comm;
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const Segments seg{data.size(), static_cast<size_t>(p)};
  const size_t chunkElems = chunkElements(chunkBytes), maxChunks = chunksOf(seg.maxSize(), chunkElems).parts;
  ScratchRef scratch(rc.scratch);
  std::vector<float>& incoming = scratch.ref.incoming;  // two segments: this step's and the next one's
  if (incoming.size() < 2 * seg.maxSize()) incoming.resize(2 * seg.maxSize());
  std::vector<Request> sends, recvs[2] = {std::vector<Request>(maxChunks), std::vector<Request>(maxChunks)};
  const Tag tag = makeTag(rc.sequence, rc.phase);
  const char* what = "ring reduce-scatter";
  auto buffer = [&](int s) { return std::span(incoming).subspan(static_cast<size_t>(s % 2) * seg.maxSize()); };
  // Step s sends segment r-1-s and receives segment r-2-s, which it sends on at step s+1 chunk by chunk
  // as each chunk is summed: the next transfer starts while the rest is still arriving.
  auto sendChunk = [&](int s, size_t c) {
    const size_t out = ringIndex(r - 1 - s, p);
    const Segments ch = chunksOf(seg.size(out), chunkElems);
    sends.push_back(comm.isend(bytesOf(data.subspan(seg.begin(out) + ch.begin(c), ch.size(c))), rightOf(comm), tag));
  };
  auto postRecvs = [&](int s) {
    const Segments ch = chunksOf(seg.size(ringIndex(r - 2 - s, p)), chunkElems);
    for (size_t c = 0; c < ch.parts; ++c)
      recvs[s % 2][c] = comm.irecv(bytesOf(buffer(s).subspan(ch.begin(c), ch.size(c))), leftOf(comm), tag);
  };
  comm.groupStart();
  postRecvs(0);
  for (size_t c = 0; c < chunksOf(seg.size(ringIndex(r - 1, p)), chunkElems).parts; ++c) sendChunk(0, c);
  comm.groupEnd();
  for (int s = 0; s < p - 1; ++s) {
    if (s + 1 < p - 1) postRecvs(s + 1);
    const size_t in = ringIndex(r - 2 - s, p);
    const Segments ch = chunksOf(seg.size(in), chunkElems);
    for (size_t c = 0; c < ch.parts; ++c) {
      expectBytes(comm.wait(recvs[s % 2][c], comm.deadline(), what), ch.size(c) * sizeof(float), comm, what);
      addInto(data.data() + seg.begin(in) + ch.begin(c), buffer(s).data() + ch.begin(c), ch.size(c));
      if (s + 1 < p - 1) sendChunk(s + 1, c);
    }
  }
  waitAll(comm, sends, comm.deadline(), what);
}

void ringAllgatherRaw(const RingContext& rc, std::span<float> data, size_t chunkBytes) {
  Communicator& comm = rc.comm;
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const Segments seg{data.size(), static_cast<size_t>(p)};
  const size_t chunkElems = chunkElements(chunkBytes), maxChunks = chunksOf(seg.maxSize(), chunkElems).parts;
  std::vector<Request> sends, recvs[2] = {std::vector<Request>(maxChunks), std::vector<Request>(maxChunks)};
  const Tag tag = makeTag(rc.sequence, rc.phase + 1);
  const char* what = "ring all-gather";
  auto chunkOf = [&](size_t segment, size_t c) {
    const Segments ch = chunksOf(seg.size(segment), chunkElems);
    return data.subspan(seg.begin(segment) + ch.begin(c), ch.size(c));
  };
  // Step s receives segment r-s-1 into place and forwards each chunk at step s+1 as soon as it arrived.
  auto postRecvs = [&](int s) {
    const size_t in = ringIndex(r - s - 1, p);
    for (size_t c = 0; c < chunksOf(seg.size(in), chunkElems).parts; ++c)
      recvs[s % 2][c] = comm.irecv(bytesOf(chunkOf(in, c)), leftOf(comm), tag);
  };
  comm.groupStart();
  postRecvs(0);
  const size_t mine = static_cast<size_t>(r);
  for (size_t c = 0; c < chunksOf(seg.size(mine), chunkElems).parts; ++c)
    sends.push_back(comm.isend(bytesOf(chunkOf(mine, c)), rightOf(comm), tag));
  comm.groupEnd();
  for (int s = 0; s < p - 1; ++s) {
    if (s + 1 < p - 1) postRecvs(s + 1);
    const size_t in = ringIndex(r - s - 1, p);
    for (size_t c = 0; c < chunksOf(seg.size(in), chunkElems).parts; ++c) {
      const auto chunk = chunkOf(in, c);
      expectBytes(comm.wait(recvs[s % 2][c], comm.deadline(), what), chunk.size_bytes(), comm, what);
      if (s + 1 < p - 1) sends.push_back(comm.isend(bytesOf(chunk), rightOf(comm), tag));
    }
  }
  waitAll(comm, sends, comm.deadline(), what);
}

void ringReduceScatterCoded(const RingContext& rc, std::span<float> data, PayloadCodec& codec, size_t chunkBytes) {
  Communicator& comm = rc.comm;
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const size_t n = data.size(), chunkElems = chunkElements(chunkBytes);
  const Segments seg{n, static_cast<size_t>(p)};
  const size_t maxChunks = chunksOf(seg.maxSize(), chunkElems).parts;
  ScratchRef scratch(rc.scratch);
  auto& slots = scratch.ref.chunkSlots;  // [parity][send | recv][chunk]
  if (slots.size() < 4 * maxChunks) slots.resize(4 * maxChunks);
  auto slot = [&](int s, int recv, size_t c) -> WireBuffer& {
    return slots[static_cast<size_t>((s % 2) * 2 + recv) * maxChunks + c];
  };
  std::vector<Request> sends[2] = {std::vector<Request>(maxChunks), std::vector<Request>(maxChunks)};
  std::vector<Request> recvs[2] = {std::vector<Request>(maxChunks), std::vector<Request>(maxChunks)};
  std::vector<std::span<std::byte>> recvWires[2] = {std::vector<std::span<std::byte>>(maxChunks),
                                                    std::vector<std::span<std::byte>>(maxChunks)};
  const Tag tag = makeTag(rc.sequence, rc.phase);
  const char* what = "compressed ring reduce-scatter";
  auto context = [&](size_t segment, size_t c) {
    return EncodeContext{chunkSeed(rc.seed, segment, c), static_cast<uint32_t>(r), rc.step, rc.tensorId, 0};
  };
  // Step s sends segment r-1-s and receives segment r-2-s (the segment it sends at step s+1).
  auto sendChunk = [&](int s, size_t c) {
    const size_t out = ringIndex(r - 1 - s, p);
    const Segments ch = chunksOf(seg.size(out), chunkElems);
    const size_t offset = seg.begin(out) + ch.begin(c), count = ch.size(c);
    const EncodeContext ctx = context(out, c);
    Request& previous = sends[s % 2][c];  // this slot's send two steps ago must be done before reuse
    if (previous.valid()) comm.wait(previous, comm.deadline(), what);
    const auto wire = slot(s, 0, c).span(codec.maxBytes(count, ctx));
    const size_t bytes = codec.encodeSlice(data.subspan(offset, count), wire, ctx, offset, n);
    previous = comm.isend(wire.first(bytes), (r + 1) % p, tag);
  };
  // Receives are posted a step ahead, so a neighbour's chunks never wait for this rank's compression.
  auto postRecvs = [&](int s) {
    const size_t in = ringIndex(r - 2 - s, p);
    const Segments ch = chunksOf(seg.size(in), chunkElems);
    for (size_t c = 0; c < ch.parts; ++c) {
      recvWires[s % 2][c] = slot(s, 1, c).span(codec.maxBytes(ch.size(c), context(in, c)));
      recvs[s % 2][c] = comm.irecv(recvWires[s % 2][c], (r + p - 1) % p, tag);
    }
  };
  postRecvs(0);
  for (size_t c = 0; c < chunksOf(seg.size(ringIndex(r - 1, p)), chunkElems).parts; ++c) sendChunk(0, c);
  for (int s = 0; s < p - 1; ++s) {
    if (s + 1 < p - 1) postRecvs(s + 1);
    const size_t in = ringIndex(r - 2 - s, p);
    const Segments ch = chunksOf(seg.size(in), chunkElems);
    for (size_t c = 0; c < ch.parts; ++c) {
      const size_t got = comm.wait(recvs[s % 2][c], comm.deadline(), what);
      codec.decode(recvWires[s % 2][c].first(got), data.subspan(seg.begin(in) + ch.begin(c), ch.size(c)),
                   DecodeMode::Accumulate);
      if (s + 1 < p - 1) sendChunk(s + 1, c);
    }
  }
  for (auto& parity : sends) waitAll(comm, parity, comm.deadline(), what);
}

void ringAllgatherCoded(const RingContext& rc, std::span<float> data, PayloadCodec& codec, size_t chunkBytes) {
  Communicator& comm = rc.comm;
  const int p = comm.size(), r = comm.rank();
  const size_t n = data.size(), chunkElems = chunkElements(chunkBytes);
  const Segments seg{n, static_cast<size_t>(p)};
  const size_t maxChunks = chunksOf(seg.maxSize(), chunkElems).parts;
  ScratchRef scratch(rc.scratch);
  auto& slots = scratch.ref.chunkSlots;  // [segment][chunk]: every payload is kept until it is forwarded
  if (slots.size() < static_cast<size_t>(p) * maxChunks) slots.resize(static_cast<size_t>(p) * maxChunks);
  std::vector<std::span<std::byte>> wires(static_cast<size_t>(p) * maxChunks);
  auto at = [&](size_t segment, size_t c) { return segment * maxChunks + c; };
  const Tag tag = makeTag(rc.sequence, rc.phase + 1);
  const char* what = "compressed ring all-gather";
  std::vector<Request> sends, recvs[2] = {std::vector<Request>(maxChunks), std::vector<Request>(maxChunks)};

  const size_t mine = static_cast<size_t>(r);
  const Segments own = chunksOf(seg.size(mine), chunkElems);
  for (size_t c = 0; c < own.parts; ++c) {
    const size_t offset = seg.begin(mine) + own.begin(c), count = own.size(c);
    const EncodeContext ctx{chunkSeed(rc.seed, mine, c), static_cast<uint32_t>(r), rc.step, rc.tensorId, 0};
    const auto wire = slots[at(mine, c)].span(codec.maxBytes(count, ctx));
    wires[at(mine, c)] = wire.first(codec.encodeSlice(data.subspan(offset, count), wire, ctx, offset, n));
    codec.decode(wires[at(mine, c)], data.subspan(offset, count), DecodeMode::Overwrite);
  }
  if (p == 1) return;
  // Step s receives segment r-s-1 and forwards each chunk at step s+1 the moment it has arrived.
  auto postRecvs = [&](int s) {
    const size_t in = ringIndex(r - s - 1, p);
    const Segments ch = chunksOf(seg.size(in), chunkElems);
    for (size_t c = 0; c < ch.parts; ++c) {
      const EncodeContext ctx{chunkSeed(rc.seed, in, c), 0, rc.step, rc.tensorId, 0};
      recvs[s % 2][c] = comm.irecv(slots[at(in, c)].span(codec.maxBytes(ch.size(c), ctx)), (r + p - 1) % p, tag);
    }
  };
  postRecvs(0);
  for (size_t c = 0; c < own.parts; ++c) sends.push_back(comm.isend(wires[at(mine, c)], (r + 1) % p, tag));
  for (int s = 0; s < p - 1; ++s) {
    if (s + 1 < p - 1) postRecvs(s + 1);
    const size_t in = ringIndex(r - s - 1, p);
    const Segments ch = chunksOf(seg.size(in), chunkElems);
    for (size_t c = 0; c < ch.parts; ++c) {
      const size_t got = comm.wait(recvs[s % 2][c], comm.deadline(), what);
      wires[at(in, c)] = slots[at(in, c)].span(got);
      if (s + 1 < p - 1) sends.push_back(comm.isend(wires[at(in, c)], (r + 1) % p, tag));
      codec.decode(wires[at(in, c)], data.subspan(seg.begin(in) + ch.begin(c), ch.size(c)), DecodeMode::Overwrite);
    }
  }
  waitAll(comm, sends, comm.deadline(), what);
}

GatheredPayloads::GatheredPayloads(int ranks, size_t maxBytes, WireBuffer& storage)
    : maxBytes_(maxBytes), stride_((maxBytes + 15) & ~size_t{15}), sizes_(static_cast<size_t>(ranks), 0) {
  buffer_ = storage.span(stride_ * static_cast<size_t>(ranks));
}

void ringAllgatherBytes(const RingContext& rc, GatheredPayloads& payloads) {
  Communicator& comm = rc.comm;
  const int p = comm.size(), r = comm.rank();
  const Tag tag = makeTag(rc.sequence, rc.phase + 1);
  for (int s = 0; s < p - 1; ++s) {
    const int out = static_cast<int>(ringIndex(r - s, p)), in = static_cast<int>(ringIndex(r - s - 1, p));
    comm.groupStart();
    Request recv = comm.irecv(payloads.slot(in), leftOf(comm), tag);
    Request send = comm.isend(payloads.payload(out), rightOf(comm), tag);
    comm.groupEnd();
    const Deadline d = comm.deadline();
    payloads.setSize(in, comm.wait(recv, d, "ring all-gather of payloads"));
    comm.wait(send, d, "ring all-gather of payloads");
  }
}

}  // namespace gradcomp
