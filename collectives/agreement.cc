#include "collectives/agreement.h"

#include <cstring>
#include <sstream>

#include "collectives/small_collectives.h"
#include "core/error.h"

namespace gradcomp {
namespace {

// Fixed-size wire form; the config text is carried (truncated) so the error can name it, and hashed
// in full so a difference past the truncation still counts. The node layout is this rank's view of
// every rank's node, hashed, with a short text form for the message.
struct DescriptorWire {
  char operation[16];
  uint64_t sequence;
  uint64_t count;
  int64_t root;
  uint64_t configHash;
  uint64_t layoutHash;
  uint64_t nonFiniteIndex;
  uint32_t tensorId;
  uint32_t step;
  char layout[24];
  char config[192];
};
static_assert(sizeof(DescriptorWire) == kAgreementDescriptorBytes);

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// "4 ranks, 2 per node" or, when nodes differ in size, the node of each rank ("nodes 0,0,0,1").
std::string layoutText(const Communicator& comm) {
  std::ostringstream o;
  const int perNode = comm.uniformRanksPerNode();
  if (perNode > 0) {
    o << comm.size() << " ranks, " << perNode << " per node";
  } else {
    o << "nodes";
    for (int r = 0; r < comm.size(); ++r) o << (r ? ',' : ' ') << comm.node(r);
  }
  return o.str();
}

DescriptorWire toWire(const OpDescriptor& op, const Communicator& comm) {
  DescriptorWire w{};
  std::strncpy(w.operation, op.operation, sizeof(w.operation) - 1);
  w.sequence = op.sequence;
  w.count = op.count;
  w.root = op.root;
  w.tensorId = op.tensorId;
  w.step = op.step;
  w.configHash = fnv1a(op.config.data(), op.config.size());
  uint64_t layout = 0xcbf29ce484222325ull;
  for (int r = 0; r < comm.size(); ++r) {
    const int32_t node = comm.node(r);
    layout = fnv1a(&node, sizeof node, layout);
  }
  w.layoutHash = layout;
  w.nonFiniteIndex = op.nonFiniteIndex;
  std::strncpy(w.layout, layoutText(comm).c_str(), sizeof(w.layout) - 1);
  std::strncpy(w.config, op.config.c_str(), sizeof(w.config) - 1);
  return w;
}

std::string describe(const DescriptorWire& w) {
  std::ostringstream o;
  o << w.operation << " #" << w.sequence << " count=" << w.count;
  if (w.root >= 0) o << " root=" << w.root;
  o << " tensor=" << w.tensorId << " step=" << w.step << " (" << w.layout << ") [" << w.config << "]";
  return o.str();
}

bool same(const DescriptorWire& a, const DescriptorWire& b) {
  return std::strncmp(a.operation, b.operation, sizeof(a.operation)) == 0 && a.sequence == b.sequence &&
         a.count == b.count && a.root == b.root && a.tensorId == b.tensorId && a.step == b.step &&
         a.layoutHash == b.layoutHash && a.configHash == b.configHash;
}

}  // namespace

NonFiniteInput agreeOnOperation(Communicator& comm, const OpDescriptor& op) {
  NonFiniteInput bad;
  if (comm.size() == 1) {
    if (op.nonFiniteIndex != OpDescriptor::kNoNonFinite) bad = {0, op.nonFiniteIndex};
    return bad;
  }
  const DescriptorWire mine = toWire(op, comm);
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
