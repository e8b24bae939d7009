#include "collectives/agreement.h"

#include <cstring>
#include <sstream>

#include "collectives/small_collectives.h"
#include "core/error.h"

namespace gradcomp {
namespace {

// Fixed-size wire form; the config text is carried (truncated) so the error can name it, and hashed
// in full so a difference past the truncation still counts.
struct DescriptorWire {
  char operation[16];
  uint64_t sequence;
  uint64_t count;
  int64_t root;
  uint64_t configHash;
  uint64_t nonFiniteIndex;
  char config[80];
};
static_assert(sizeof(DescriptorWire) == 136);

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

DescriptorWire toWire(const OpDescriptor& op) {
  DescriptorWire w{};
  std::strncpy(w.operation, op.operation, sizeof(w.operation) - 1);
  w.sequence = op.sequence;
  w.count = op.count;
  w.root = op.root;
  w.configHash = fnv1a(op.config);
  w.nonFiniteIndex = op.nonFiniteIndex;
  std::strncpy(w.config, op.config.c_str(), sizeof(w.config) - 1);
  return w;
}

std::string describe(const DescriptorWire& w) {
  std::ostringstream o;
  o << w.operation << " #" << w.sequence << " count=" << w.count;
  if (w.root >= 0) o << " root=" << w.root;
  o << " [" << w.config << "]";
  return o.str();
}

bool same(const DescriptorWire& a, const DescriptorWire& b) {
  return std::strncmp(a.operation, b.operation, sizeof(a.operation)) == 0 && a.sequence == b.sequence &&
         a.count == b.count && a.root == b.root && a.configHash == b.configHash;
}

}  // namespace

NonFiniteInput agreeOnOperation(Communicator& comm, const OpDescriptor& op) {
  NonFiniteInput bad;
  if (comm.size() == 1) {
    if (op.nonFiniteIndex != OpDescriptor::kNoNonFinite) bad = {0, op.nonFiniteIndex};
    return bad;
  }
  const DescriptorWire mine = toWire(op);
  const auto all = allgatherSmall(comm, std::as_bytes(std::span(&mine, 1)), makeTag(op.sequence, 0),
                                  "agreement check");
  DescriptorWire first;
  std::memcpy(&first, all.data(), sizeof(first));
  if (first.nonFiniteIndex != OpDescriptor::kNoNonFinite) bad = {0, first.nonFiniteIndex};
  for (int r = 1; r < comm.size(); ++r) {
    DescriptorWire other;
    std::memcpy(&other, all.data() + static_cast<size_t>(r) * sizeof(other), sizeof(other));
    if (!same(first, other))
      GRADCOMP_THROW(CollectiveMismatch, "ranks disagree before ", op.operation, " (seen by rank ", comm.rank(),
                     "): rank 0 has ", describe(first), ", rank ", r, " has ", describe(other));
    if (bad.rank < 0 && other.nonFiniteIndex != OpDescriptor::kNoNonFinite) bad = {r, other.nonFiniteIndex};
  }
  return bad;
}

}  // namespace gradcomp
