// The ring schedules shared by the ring all-reduce, the reduce-scatter and all-gather primitives, the
// random-k values and the hierarchical algorithm's intra-node phases.
//
// Segments: n elements split over P ranks as evenly as possible (the first n % P get one more), so any
// n works, including n < P (empty segments send empty messages).
// Reduce-scatter: at step s (0..P-2) rank r sends segment (r-1-s) and receives (r-2-s), accumulating in
// fp32; it ends owning the sum of segment r. All-gather: at step s rank r sends segment (r-s) and
// receives (r-s-1). 2(P-1) steps together, each moving one segment: 2(P-1)/P * S bytes per rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/payload_codec.h"

namespace gradcomp {

struct Segments {
  size_t n, parts;
  size_t begin(size_t i) const { return i * (n / parts) + std::min(i, n % parts); }
  size_t size(size_t i) const { return n / parts + (i < n % parts ? 1 : 0); }
  size_t maxSize() const { return n / parts + (n % parts ? 1 : 0); }
};

inline size_t ringIndex(long long i, int p) { return static_cast<size_t>(((i % p) + p) % p); }

// Buffers kept by the caller between calls: fresh multi-megabyte allocations cost page faults and
// zeroing on every all-reduce.
struct RingScratch {
  WireBuffer send, recv, gathered;
  std::vector<float> incoming;
  std::vector<WireBuffer> chunkSlots;  // compressed ring: one wire buffer per in-flight chunk
};

struct RingContext {
  Communicator& comm;
  uint64_t sequence;
  uint32_t phase;  // tag phase of the first of the two rings (reduce-scatter); all-gather uses phase + 1
  uint32_t tensorId, step;
  uint64_t seed;
  RingScratch* scratch = nullptr;  // null: temporary buffers
};

// Uncompressed fp32, pipelined in chunks of chunkBytes so the sum of one chunk overlaps the next transfer.
void ringReduceScatterRaw(const RingContext& rc, std::span<float> data, size_t chunkBytes);
void ringAllgatherRaw(const RingContext& rc, std::span<float> data, size_t chunkBytes);

// Compressed, pipelined in chunks of chunkBytes of fp32 input: each hop encodes the partial sum of one
// chunk through the codec's error-feedback policy (one residual per tensor, the rank that made an
// error keeps it), the receiver validates, decodes and accumulates in fp32, and sends that chunk on at
// once -- so chunk c+1 is on the wire while chunk c is decoded and re-encoded.
void ringReduceScatterCoded(const RingContext& rc, std::span<float> data, PayloadCodec& codec, size_t chunkBytes);
// Each owner encodes its segment once (chunk by chunk); the bytes are forwarded unchanged as soon as
// they arrive, and every rank (the owner too) decodes the same bytes, so all ranks end identical.
void ringAllgatherCoded(const RingContext& rc, std::span<float> data, PayloadCodec& codec, size_t chunkBytes);

// Variable-size byte payloads, one per rank, each 16-byte aligned (the wire format's requirement).
class GatheredPayloads {
 public:
  GatheredPayloads(int ranks, size_t maxBytes, WireBuffer& storage);
  std::span<std::byte> slot(int r) { return buffer_.subspan(static_cast<size_t>(r) * stride_, maxBytes_); }
  std::span<const std::byte> payload(int r) const {
    return buffer_.subspan(static_cast<size_t>(r) * stride_, sizes_[static_cast<size_t>(r)]);
  }
  void setSize(int r, size_t bytes) { sizes_[static_cast<size_t>(r)] = bytes; }
  size_t size(int r) const { return sizes_[static_cast<size_t>(r)]; }

 private:
  size_t maxBytes_, stride_;
  std::span<std::byte> buffer_;
  std::vector<size_t> sizes_;
};

// All-gather of one payload per rank (at most maxBytes each; this rank's already in slot(rank) with its
// size set). The ring forwards each payload unchanged: (P-1) steps.
void ringAllgatherBytes(const RingContext& rc, GatheredPayloads& payloads);

}  // namespace gradcomp
