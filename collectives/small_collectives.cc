#include "collectives/small_collectives.h"

#include <algorithm>
#include <cstring>

namespace gradcomp {

std::vector<std::byte> allgatherSmall(Communicator& comm, std::span<const std::byte> mine, Tag tag,
                                      const char* what) {
  const size_t p = static_cast<size_t>(comm.size()), b = mine.size();
  const int r = comm.rank();
  std::vector<std::byte> rotated(p * b);  // block i holds rank (r + i) % p
  if (b) std::memcpy(rotated.data(), mine.data(), b);
  for (size_t dist = 1; dist < p; dist *= 2) {
    const size_t count = std::min(dist, p - dist);
    const int to = static_cast<int>((static_cast<size_t>(r) + p - dist) % p);
    const int from = static_cast<int>((static_cast<size_t>(r) + dist) % p);
    Request reqs[2];
    comm.groupStart();
    reqs[0] = comm.irecv(std::span(rotated).subspan(dist * b, count * b), from, tag);
    reqs[1] = comm.isend(std::span<const std::byte>(rotated).first(count * b), to, tag);
    comm.groupEnd();
    const Deadline d = comm.deadline();
    const size_t got = comm.wait(reqs[0], d, what);
    comm.wait(reqs[1], d, what);
    if (got != count * b)
      GRADCOMP_THROW(TransportError, what, ": rank ", from, " sent ", got, " bytes, expected ", count * b);
  }
  std::vector<std::byte> out(p * b);
  for (size_t i = 0; i < p; ++i) {
    const size_t owner = (static_cast<size_t>(r) + i) % p;
    if (b) std::memcpy(out.data() + owner * b, rotated.data() + i * b, b);
  }
  return out;
}

}  // namespace gradcomp
