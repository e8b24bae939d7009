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

void ringReduceScatterRaw(const RingContext& rc, std::span<float> data, size_t chunkBytes) {
  Communicator& comm = rc.comm;
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const Segments seg{data.size(), static_cast<size_t>(p)};
  const size_t chunk = std::max<size_t>(1, chunkBytes / sizeof(float));
  ScratchRef scratch(rc.scratch);
  std::vector<float>& incoming = scratch.ref.incoming;
  if (incoming.size() < seg.maxSize()) incoming.resize(seg.maxSize());
  std::vector<Request> recvs, sends;
  const Tag tag = makeTag(rc.sequence, rc.phase);
  for (int s = 0; s < p - 1; ++s) {
    const size_t out = ringIndex(r - 1 - s, p), in = ringIndex(r - 2 - s, p);
    const size_t inSize = seg.size(in), outSize = seg.size(out);
    recvs.clear();
    sends.clear();
    // Post every receive of the step before sending, so the left neighbour's chunks land directly.
    comm.groupStart();
    for (size_t c = 0; c < std::max<size_t>(1, inSize); c += chunk)
      recvs.push_back(comm.irecv(bytesOf(std::span(incoming).subspan(c, std::min(chunk, inSize - std::min(c, inSize)))),
                                 leftOf(comm), tag));
    for (size_t c = 0; c < std::max<size_t>(1, outSize); c += chunk)
      sends.push_back(comm.isend(bytesOf(data.subspan(seg.begin(out) + c, std::min(chunk, outSize - std::min(c, outSize)))),
                                 rightOf(comm), tag));
    comm.groupEnd();
    const Deadline d = comm.deadline();
    for (size_t i = 0, c = 0; i < recvs.size(); ++i, c += chunk) {
      const size_t want = std::min(chunk, inSize - std::min(c, inSize));
      expectBytes(comm.wait(recvs[i], d, "ring reduce-scatter"), want * sizeof(float), comm, "ring reduce-scatter");
      addInto(data.data() + seg.begin(in) + c, incoming.data() + c, want);
    }
    waitAll(comm, sends, d, "ring reduce-scatter");
  }
}

void ringAllgatherRaw(const RingContext& rc, std::span<float> data, size_t chunkBytes) {
  Communicator& comm = rc.comm;
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const Segments seg{data.size(), static_cast<size_t>(p)};
  const size_t chunk = std::max<size_t>(1, chunkBytes / sizeof(float));
  std::vector<Request> reqs;
  const Tag tag = makeTag(rc.sequence, rc.phase + 1);
  for (int s = 0; s < p - 1; ++s) {
    const size_t out = ringIndex(r - s, p), in = ringIndex(r - s - 1, p);
    const size_t inSize = seg.size(in), outSize = seg.size(out);
    reqs.clear();
    comm.groupStart();
    for (size_t c = 0; c < std::max<size_t>(1, inSize); c += chunk)
      reqs.push_back(comm.irecv(bytesOf(data.subspan(seg.begin(in) + c, std::min(chunk, inSize - std::min(c, inSize)))),
                                leftOf(comm), tag));
    const size_t numRecvs = reqs.size();
    for (size_t c = 0; c < std::max<size_t>(1, outSize); c += chunk)
      reqs.push_back(comm.isend(bytesOf(data.subspan(seg.begin(out) + c, std::min(chunk, outSize - std::min(c, outSize)))),
                                rightOf(comm), tag));
    comm.groupEnd();
    const Deadline d = comm.deadline();
    for (size_t i = 0, c = 0; i < numRecvs; ++i, c += chunk) {
      const size_t want = std::min(chunk, inSize - std::min(c, inSize));
      expectBytes(comm.wait(reqs[i], d, "ring all-gather"), want * sizeof(float), comm, "ring all-gather");
    }
    waitAll(comm, std::span(reqs).subspan(numRecvs), d, "ring all-gather");
  }
}

void ringReduceScatterCoded(const RingContext& rc, std::span<float> data, PayloadCodec& codec) {
  Communicator& comm = rc.comm;
  const int p = comm.size(), r = comm.rank();
  if (p == 1) return;
  const Segments seg{data.size(), static_cast<size_t>(p)};
  ScratchRef scratch(rc.scratch);
  WireBuffer &sendBuf = scratch.ref.send, &recvBuf = scratch.ref.recv;
  const Tag tag = makeTag(rc.sequence, rc.phase);
  for (int s = 0; s < p - 1; ++s) {
    const size_t out = ringIndex(r - 1 - s, p), in = ringIndex(r - 2 - s, p);
    EncodeContext ctx{rc.seed, static_cast<uint32_t>(r), rc.step, segmentKey(rc.tensorId, out), 0};
    EncodeContext inCtx = ctx;
    inCtx.tensorId = segmentKey(rc.tensorId, in);
    const auto recvWire = recvBuf.span(codec.maxBytes(seg.size(in), inCtx));
    // Post the receive before encoding, so the left neighbour's send never waits on our compression.
    Request recv = comm.irecv(recvWire, leftOf(comm), tag);
    const auto sendWire = sendBuf.span(codec.maxBytes(seg.size(out), ctx));
    const size_t bytes = codec.encode(data.subspan(seg.begin(out), seg.size(out)), sendWire, ctx);
    Request send = comm.isend(sendWire.first(bytes), rightOf(comm), tag);
    const Deadline d = comm.deadline();
    const size_t got = comm.wait(recv, d, "compressed ring reduce-scatter");
    codec.decode(recvWire.first(got), data.subspan(seg.begin(in), seg.size(in)), DecodeMode::Accumulate);
    comm.wait(send, d, "compressed ring reduce-scatter");
  }
}

void ringAllgatherCoded(const RingContext& rc, std::span<float> data, PayloadCodec& codec) {
  Communicator& comm = rc.comm;
  const int p = comm.size(), r = comm.rank();
  const Segments seg{data.size(), static_cast<size_t>(p)};
  EncodeContext ctx{rc.seed, static_cast<uint32_t>(r), rc.step, segmentKey(rc.tensorId, static_cast<size_t>(r)), 0};
  size_t maxBytes = 0;
  for (int q = 0; q < p; ++q) {
    EncodeContext c = ctx;
    c.tensorId = segmentKey(rc.tensorId, static_cast<size_t>(q));
    maxBytes = std::max(maxBytes, codec.maxBytes(seg.size(static_cast<size_t>(q)), c));
  }
  ScratchRef scratch(rc.scratch);
  GatheredPayloads payloads(p, maxBytes, scratch.ref.gathered);
  const auto mine = data.subspan(seg.begin(static_cast<size_t>(r)), seg.size(static_cast<size_t>(r)));
  payloads.setSize(r, codec.encode(mine, payloads.slot(r), ctx));
  codec.decode(payloads.payload(r), mine, DecodeMode::Overwrite);
  ringAllgatherBytes(rc, payloads);
  for (int q = 0; q < p; ++q)
    if (q != r)
      codec.decode(payloads.payload(q), data.subspan(seg.begin(static_cast<size_t>(q)), seg.size(static_cast<size_t>(q))),
                   DecodeMode::Overwrite);
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
