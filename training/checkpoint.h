// Per-rank checkpoints: step, parameters, optimizer state, every error-feedback residual (each
// bucket's and 1-bit Adam's momentum all-reduce's), and a fingerprint of the configuration. Batches
// and stochastic codecs draw from counter-based streams keyed by (seed, rank, step), so the step *is*
// the RNG state: a resumed run is bitwise identical to an uninterrupted one (tested).
// Written to a temporary file and renamed, so a crash mid-write leaves the previous checkpoint. The file
// carries a format version, the state's length and a SHA-256 over the header and the state, all checked
// before any of it is used: a corrupted, truncated or foreign file is an error naming it, never a resume
// from wrong state.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace gradcomp {

struct CheckpointHeader {
  uint64_t step = 0;  // the next step to run
  uint64_t configFingerprint = 0;
  uint32_t worldSize = 0, rank = 0;
};

// `body` writes the state after the header; load's `body` reads it back in the same order.
void writeCheckpoint(const std::string& path, const CheckpointHeader& header,
                     const std::function<void(std::ostream&)>& body);
// Throws InvalidArgument naming the file and the problem (missing, not a checkpoint, another format
// version, truncated, checksum mismatch, state left over).
// `check` sees the header before any state is read (to refuse another configuration's checkpoint).
CheckpointHeader readCheckpoint(const std::string& path, const std::function<void(const CheckpointHeader&)>& check,
                                const std::function<void(std::istream&)>& body);

void writeFloats(std::ostream& out, const std::vector<float>& v);
void readFloats(std::istream& in, std::vector<float>& v, const char* what);  // size must match v's

// FNV-1a of a string (the resolved configuration's JSON, minus fields that may change on resume).
uint64_t fingerprint(const std::string& text);

}  // namespace gradcomp
