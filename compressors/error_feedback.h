// Error-feedback policies, composable with every codec and owned outside it, with state keyed by
// tensor id (save/load for checkpoints):
//
//   none  wire = C(g)
//   ef    c = g + e; wire = C(c); e <- c - D(wire)                 (Seide et al.; Karimireddy et al.)
//         ef:scale=auto: wire = C(c / (1 + omega)) where the codec's varianceBound omega is >= 1 (plain
//         ef where it is below: contractive already). An unbiased codec with omega >= 1 (qsgd at 4 bits,
//         terngrad) is not contractive, and plain ef's residual can then grow without bound (ef warns
//         once); C / (1 + omega) is contractive (Beznosikov et al. 2020), and these codecs scale with
//         their input, so encoding c / (1 + omega) sends it.
//   ef21  wire = C(g - h); h <- h + D(wire); after the all-reduce the optimizer sees H <- H + sum
//         (Richtarik, Sokolov, Fatkhullin 2021; h is this worker's estimate, H the shared one)
//   ef21-sgdm  v <- (1 - eta) v + eta g; then ef21 on v: wire = C(v - h); h <- h + D(wire); H <- H + sum
//         (Fatkhullin, Tyurin, Richtarik 2023; eta=0.1 by default)
//   dgc   u <- m u + clip(g); c = v + u; wire = C(c); v <- c - D(wire); u <- 0 where D(wire) != 0
//         (Lin et al. 2018: momentum correction, factor masking, local clipping, warm-up schedule)
//
// Invariants, tested: ef   g + e_before        == D(wire) + e_after
//                     ef21 h_after             == h_before + D(wire), wire = C(g - h_before)
//                     ef21-sgdm the same with v_after = (1 - eta) v_before + eta g in place of g
//                     dgc  v_before + u_after' == D(wire) + v_after (u_after' before masking)
// up to fp32 rounding of the two additions (exact when D(wire) equals the sent values, as for
// sparse codecs with fp32 values).
//
// Non-finite gradients: by default a NonFiniteError naming tensor and first bad index; with
// nonfinite=skip the step sends an encoding of zeros instead. Either way the state is not touched by
// a non-finite step. A residual that becomes non-finite or exceeds `limit` in magnitude is reset to
// zero with a warning (resets() counts them). A tensor whose element count changes is an error
// (shape=error, default) or resets its state with a warning (shape=reset).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compressors/compressor.h"

namespace gradcomp {

struct CompressOutcome {
  EncodeResult encoded;
  bool skipped = false;        // non-finite gradient under nonfinite=skip: zeros were sent
  bool residualReset = false;  // the state was reset (non-finite / over the limit) before this step
};

class ErrorFeedback {
 public:
  using WarningSink = std::function<void(const std::string&)>;

  // "none", "ef", "ef:scale=auto", "ef21", "dgc:momentum=0.9,clip=0,warmup=0", each also taking
  // nonfinite=error|skip, shape=error|reset, limit=1e30.
  static std::unique_ptr<ErrorFeedback> make(const std::string& spec);
  virtual ~ErrorFeedback() = default;

  const std::string& name() const { return name_; }
  // The spec in normal form, defaults included (CodecSpec::canonical): equal for equivalent spellings.
  const std::string& canonicalSpec() const { return canonical_; }

  // The wire size to reserve for tensor of n elements at this step (DGC's warm-up sends more).
  size_t maxEncodedBytes(const Compressor& codec, size_t n, const EncodeContext& ctx) const;
  // Steps at the start whose payloads are larger than every later step's (DGC's warm-up); from this step
  // on every step sends the codec's own size. The cost model predicts that steady step.
  virtual uint32_t warmupSteps() const { return 0; }

  // Compresses tensor ctx.tensorId's gradient under this policy.
  CompressOutcome compress(const Compressor& codec, std::span<const float> grad, std::span<std::byte> wire,
                           const EncodeContext& ctx);

  // Compresses elements [offset, offset + grad.size()) of tensor ctx.tensorId, whose state covers
  // fullLength elements. The compressed ring encodes every chunk of a tensor separately (one chunk per
  // message, pipelined) and keeps one residual per tensor; only policies whose state is elementwise
  // (none, ef) support it -- others throw InvalidArgument. Same non-finite / limit rules as compress(),
  // applied to the slice.
  CompressOutcome compressSlice(const Compressor& codec, std::span<const float> grad, std::span<std::byte> wire,
                                const EncodeContext& ctx, size_t offset, size_t fullLength);
  virtual bool sliceable() const { return false; }
  // A sliceable policy's residual of one tensor, writable; empty for `none` and for a tensor without
  // state. The compressed ring's rotated domain moves it into the gradient before the all-reduce and
  // rotates the hops' residuals back after it (collectives/ring_allreduce.cc). Throws InvalidArgument for
  // a policy that is not sliceable.
  std::span<float> sliceResidual(uint32_t tensorId);
  // compressSlice's limit rule applied to a tensor's whole residual where its slices were written in
  // another domain and moved back afterwards (the ring's rotated domain: a rotated residual's magnitudes
  // are not the original's, so the check at each slice does not bound these): a residual that is
  // non-finite or past `limit` is reset to zero with a warning. Returns whether it was.
  bool enforceResidualLimit(uint32_t tensorId, uint32_t step);

  // Turns the all-reduced decoded payloads into the update the optimizer applies (identity except
  // for ef21, which adds them to its shared estimate and returns that).
  virtual void finish(uint32_t tensorId, std::span<float> reduced);

  void reset(uint32_t tensorId) { state_.erase(tensorId); }
  void resetAll() { state_.clear(); }
  uint64_t resets() const { return resets_; }
  void setWarningSink(WarningSink sink) { warn_ = std::move(sink); }

  // Buffer `which` of a tensor's state (tests and inspection); empty if the tensor has none.
  std::span<const float> stateBuffer(uint32_t tensorId, int which) const;
  // State buffers per tensor (0 for `none`, 1 for ef, 2 for ef21 and dgc, 3 for ef21-sgdm) and the tensors that have state.
  int numBuffers() const { return numBuffers_; }
  std::vector<uint32_t> tensorIds() const;
  // Replaces a tensor's state with `buffers` (numBuffers() of them, equal lengths, finite): how a caller
  // that keys state by something else (the Python DDP hook: parameter name and offset) moves residuals
  // onto a new bucket layout or restores them from a checkpoint. Throws InvalidArgument naming the problem.
  void setState(uint32_t tensorId, const std::vector<std::span<const float>>& buffers);

  void save(std::ostream& out) const;
  void load(std::istream& in);  // throws InvalidArgument if the file is not this policy's state

 protected:
  ErrorFeedback(const CodecSpec& spec, int numBuffers);

  struct TensorState {
    std::vector<std::vector<float>> buffers;
  };

  // Runs the policy with a finite gradient; may throw NonFiniteError when the state is poisoned.
  virtual EncodeResult compressFinite(const Compressor& codec, std::span<const float> grad, std::span<std::byte> wire,
                                      const EncodeContext& ctx, TensorState& st) = 0;
  virtual uint64_t kOverride(const Compressor& codec, size_t n, const EncodeContext& ctx) const;
  // compressSlice's policy step: `residual` is the slice of buffer 0 (empty for stateless policies).
  virtual EncodeResult compressSliceFinite(const Compressor& codec, std::span<const float> grad,
                                           std::span<std::byte> wire, const EncodeContext& ctx,
                                           std::span<float> residual);

  std::vector<float>& scratch(size_t n);
  std::vector<float>* mutableStateBuffer(uint32_t tensorId, int which);
  // A residual (or a slice of one) set to zero after `warning`, counted in resets().
  void resetResidual(std::span<float> residual, const std::string& warning);
  void warn(const std::string& message) const;

 private:
  TensorState& stateFor(uint32_t tensorId, size_t n);
  bool overLimit(const TensorState& st) const;
  bool overLimit(std::span<const float> values) const;
  // Non-finite gradient: throws (nonfinite=error) or encodes zeros (skip) and returns true.
  bool handleNonFinite(const Compressor& codec, std::span<const float> grad, std::span<std::byte> wire,
                       const EncodeContext& ctx, CompressOutcome& out) const;

  std::string name_;
  std::string canonical_;
  int numBuffers_;
  bool skipNonFinite_;
  bool resetOnShapeChange_;
  float limit_;
  uint64_t resets_ = 0;
  WarningSink warn_;
  std::map<uint32_t, TensorState> state_;
  TensorState stateless_;
  std::vector<float> scratch_;
};

}  // namespace gradcomp
