#include "compressors/error_feedback.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>

#include "core/error.h"
#include "kernels/scalar/host_device.h"

namespace gradcomp {

std::unique_ptr<ErrorFeedback> makeNoFeedback(const CodecSpec&);
std::unique_ptr<ErrorFeedback> makeResidualFeedback(const CodecSpec&);
std::unique_ptr<ErrorFeedback> makeEf21Feedback(const CodecSpec&);
std::unique_ptr<ErrorFeedback> makeEf21SgdmFeedback(const CodecSpec&);
std::unique_ptr<ErrorFeedback> makeDgcFeedback(const CodecSpec&);

std::unique_ptr<ErrorFeedback> ErrorFeedback::make(const std::string& text) {
  const CodecSpec spec = CodecSpec::parse(text);
  std::unique_ptr<ErrorFeedback> p;
  if (spec.name() == "none") p = makeNoFeedback(spec);
  else if (spec.name() == "ef") p = makeResidualFeedback(spec);
  else if (spec.name() == "ef21") p = makeEf21Feedback(spec);
  else if (spec.name() == "ef21-sgdm") p = makeEf21SgdmFeedback(spec);
  else if (spec.name() == "dgc") p = makeDgcFeedback(spec);
  else GRADCOMP_THROW(InvalidArgument, "unknown error-feedback policy '", spec.name(), "' (known: none, ef, ef21, ef21-sgdm, dgc)");
  spec.checkAllUsed();
  p->canonical_ = spec.canonical();
  return p;
}

ErrorFeedback::ErrorFeedback(const CodecSpec& spec, int numBuffers)
    : name_(spec.name()),
      numBuffers_(numBuffers),
      skipNonFinite_(spec.getChoice("nonfinite", "error", {"error", "skip"}) == "skip"),
      resetOnShapeChange_(spec.getChoice("shape", "error", {"error", "reset"}) == "reset"),
      limit_(static_cast<float>(spec.getDouble("limit", 1e30, 0.0, 3.4028234e38))) {}

void ErrorFeedback::warn(const std::string& message) const {
  if (warn_)
    warn_(message);
  else
    std::cerr << "gradcomp warning: " << message << "\n";
}

std::vector<float>& ErrorFeedback::scratch(size_t n) {
  scratch_.resize(n);
  return scratch_;
}

uint64_t ErrorFeedback::kOverride(const Compressor&, size_t, const EncodeContext& ctx) const { return ctx.kOverride; }

size_t ErrorFeedback::maxEncodedBytes(const Compressor& codec, size_t n, const EncodeContext& ctx) const {
  EncodeContext c = ctx;
  c.kOverride = kOverride(codec, n, ctx);
  return codec.maxEncodedBytes(n, c);
}

ErrorFeedback::TensorState& ErrorFeedback::stateFor(uint32_t tensorId, size_t n) {
  if (numBuffers_ == 0) return stateless_;  // `none` keeps nothing, so no shape to check either
  auto it = state_.find(tensorId);
  if (it != state_.end() && it->second.buffers[0].size() != n) {
    GRADCOMP_CHECK_ARG(resetOnShapeChange_, "error feedback '", name_, "': tensor ", tensorId, " has state for ",
                       it->second.buffers[0].size(), " elements but the gradient has ", n,
                       " (re-bucketed?): call reset(", tensorId, ") or use shape=reset");
    warn(detail::concat("error feedback '", name_, "': tensor ", tensorId, " changed from ",
                        it->second.buffers[0].size(), " to ", n, " elements; its state was reset"));
    state_.erase(it);
    it = state_.end();
  }
  if (it == state_.end()) {
    TensorState st;
    st.buffers.assign(static_cast<size_t>(numBuffers_), std::vector<float>(n, 0.0f));
    it = state_.emplace(tensorId, std::move(st)).first;
  }
  return it->second;
}

bool ErrorFeedback::overLimit(std::span<const float> values) const {
  uint32_t worst = 0;
  for (float v : values) worst = std::max(worst, scalar::absBits(v));
  return !(scalar::bitsToFloat(worst) <= limit_);  // NaN compares false: caught too
}

bool ErrorFeedback::overLimit(const TensorState& st) const {
  for (const auto& b : st.buffers)
    if (overLimit(b)) return true;
  return false;
}

bool ErrorFeedback::handleNonFinite(const Compressor& codec, std::span<const float> grad, std::span<std::byte> wire,
                                    const EncodeContext& ctx, CompressOutcome& out) const {
  const uint64_t bad = firstNonFinite(grad);
  if (bad == EncodeResult::kNoIndex) return false;
  if (!skipNonFinite_)
    throw NonFiniteError(__FILE__, __LINE__,
                         detail::concat("error feedback '", name_, "' with codec '", codec.name(), "': tensor ",
                                        ctx.tensorId, " has a non-finite gradient (", grad[bad], ") at index ", bad,
                                        " of ", grad.size(), " at step ", ctx.step),
                         ctx.tensorId, bad);
  // Skip: this rank contributes zeros; the state is untouched.
  std::vector<float> zeros(grad.size(), 0.0f);
  out.encoded = codec.encode(zeros, wire, ctx);
  out.skipped = true;
  return true;
}

EncodeResult ErrorFeedback::compressSliceFinite(const Compressor&, std::span<const float>, std::span<std::byte>,
                                                const EncodeContext&, std::span<float>) {
  GRADCOMP_THROW(InvalidArgument, "error feedback '", name_, "' cannot compress a slice of a tensor");
}

CompressOutcome ErrorFeedback::compressSlice(const Compressor& codec, std::span<const float> grad,
                                             std::span<std::byte> wire, const EncodeContext& ctx, size_t offset,
                                             size_t fullLength) {
  GRADCOMP_CHECK_ARG(sliceable(), "error feedback '", name_,
                     "' cannot compress a slice of a tensor: its state is not elementwise (use none or ef)");
  GRADCOMP_CHECK_ARG(offset <= fullLength && grad.size() <= fullLength - offset, "error feedback slice [", offset,
                     ", ", offset + grad.size(), ") outside a tensor of ", fullLength, " elements");
  CompressOutcome out;
  if (numBuffers_ == 0 && !skipNonFinite_) {
    out.encoded = codec.encode(grad, wire, ctx);
    return out;
  }
  if (handleNonFinite(codec, grad, wire, ctx, out)) return out;
  std::span<float> residual;
  if (numBuffers_ > 0 && !grad.empty())
    residual = std::span(stateFor(ctx.tensorId, fullLength).buffers[0]).subspan(offset, grad.size());
  try {
    out.encoded = compressSliceFinite(codec, grad, wire, ctx, residual);
  } catch (const NonFiniteError&) {
    resetResidual(residual, detail::concat("error feedback '", name_, "': tensor ", ctx.tensorId,
                                           " state became non-finite at step ", ctx.step, " (elements ", offset, "..",
                                           offset + grad.size(), "); reset to zero"));
    out.residualReset = true;
    out.encoded = compressSliceFinite(codec, grad, wire, ctx, residual);
  }
  if (!residual.empty() && overLimit(residual)) {
    resetResidual(residual, detail::concat("error feedback '", name_, "': tensor ", ctx.tensorId,
                                           " state exceeded |x| <= ", limit_, " at step ", ctx.step, " (elements ",
                                           offset, "..", offset + grad.size(), "); reset to zero"));
    out.residualReset = true;
  }
  return out;
}

CompressOutcome ErrorFeedback::compress(const Compressor& codec, std::span<const float> grad, std::span<std::byte> wire,
                                        const EncodeContext& ctx) {
  CompressOutcome out;
  EncodeContext c = ctx;
  c.kOverride = kOverride(codec, grad.size(), ctx);
  // Stateless and not skipping: the codec's own tile-by-tile check raises the same NonFiniteError, so
  // a separate pass over the gradient would only cost memory bandwidth.
  if (numBuffers_ == 0 && !skipNonFinite_) {
    out.encoded = codec.encode(grad, wire, c);
    return out;
  }
  if (handleNonFinite(codec, grad, wire, c, out)) return out;
  if (grad.empty()) {
    out.encoded = codec.encode(grad, wire, c);
    return out;
  }
  TensorState& st = stateFor(ctx.tensorId, grad.size());
  try {
    out.encoded = compressFinite(codec, grad, wire, c, st);
  } catch (const NonFiniteError&) {
    // The gradient is finite, so the state overflowed or was poisoned: start it again from zero.
    warn(detail::concat("error feedback '", name_, "': tensor ", ctx.tensorId, " state became non-finite at step ",
                        ctx.step, "; reset to zero"));
    for (auto& b : st.buffers) std::fill(b.begin(), b.end(), 0.0f);
    ++resets_;
    out.residualReset = true;
    out.encoded = compressFinite(codec, grad, wire, c, st);
  }
  if (overLimit(st)) {
    warn(detail::concat("error feedback '", name_, "': tensor ", ctx.tensorId, " state exceeded |x| <= ", limit_,
                        " at step ", ctx.step, "; reset to zero"));
    for (auto& b : st.buffers) std::fill(b.begin(), b.end(), 0.0f);
    ++resets_;
    out.residualReset = true;
  }
  return out;
}

void ErrorFeedback::finish(uint32_t, std::span<float>) {}

std::vector<uint32_t> ErrorFeedback::tensorIds() const {
  std::vector<uint32_t> ids;
  ids.reserve(state_.size());
  for (const auto& [id, st] : state_) ids.push_back(id);
  return ids;
}

void ErrorFeedback::setState(uint32_t tensorId, const std::vector<std::span<const float>>& buffers) {
  GRADCOMP_CHECK_ARG(buffers.size() == static_cast<size_t>(numBuffers_), "error feedback '", name_, "' keeps ",
                     numBuffers_, " state buffer(s) per tensor, got ", buffers.size(), " for tensor ", tensorId);
  if (numBuffers_ == 0) return;
  const size_t n = buffers[0].size();
  TensorState st;
  for (size_t b = 0; b < buffers.size(); ++b) {
    GRADCOMP_CHECK_ARG(buffers[b].size() == n, "error feedback '", name_, "': state buffer ", b, " of tensor ",
                       tensorId, " has ", buffers[b].size(), " elements, buffer 0 has ", n);
    const uint64_t bad = firstNonFinite(buffers[b]);
    GRADCOMP_CHECK_ARG(bad == EncodeResult::kNoIndex, "error feedback '", name_, "': state buffer ", b,
                       " of tensor ", tensorId, " holds a non-finite value at index ", bad);
    st.buffers.emplace_back(buffers[b].begin(), buffers[b].end());
  }
  state_[tensorId] = std::move(st);
}

std::span<const float> ErrorFeedback::stateBuffer(uint32_t tensorId, int which) const {
  const auto it = state_.find(tensorId);
  if (it == state_.end() || which < 0 || which >= numBuffers_) return {};
  return it->second.buffers[static_cast<size_t>(which)];
}

std::span<float> ErrorFeedback::sliceResidual(uint32_t tensorId) {
  GRADCOMP_CHECK_ARG(sliceable(), "error feedback '", name_, "' keeps no per-element residual to slice");
  std::vector<float>* residual = mutableStateBuffer(tensorId, 0);
  return residual ? std::span<float>(*residual) : std::span<float>();
}

bool ErrorFeedback::enforceResidualLimit(uint32_t tensorId, uint32_t step) {
  std::vector<float>* residual = mutableStateBuffer(tensorId, 0);
  if (!residual || !overLimit(*residual)) return false;
  resetResidual(*residual, detail::concat("error feedback '", name_, "': tensor ", tensorId, " state exceeded |x| <= ",
                                          limit_, " at step ", step, " (after the all-reduce's rotated domain); reset to zero"));
  return true;
}

void ErrorFeedback::resetResidual(std::span<float> residual, const std::string& warning) {
  warn(warning);
  std::fill(residual.begin(), residual.end(), 0.0f);
  ++resets_;
}

std::vector<float>* ErrorFeedback::mutableStateBuffer(uint32_t tensorId, int which) {
  const auto it = state_.find(tensorId);
  if (it == state_.end() || which < 0 || which >= numBuffers_) return nullptr;
  return &it->second.buffers[static_cast<size_t>(which)];
}

// File: "GCEF" u32 version, name length + name, u32 buffers per tensor, u64 tensors, then per tensor
// u32 id, u64 n, n floats per buffer. Little-endian, as written by this machine.
namespace {
constexpr uint32_t kStateMagic = 0x46454347u;  // "GCEF"
constexpr uint32_t kStateVersion = 1;

template <typename T>
void put(std::ostream& o, const T& v) {
  o.write(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
T get(std::istream& in, const char* what) {
  T v{};
  in.read(reinterpret_cast<char*>(&v), sizeof(T));
  GRADCOMP_CHECK_ARG(in.good(), "error-feedback state: truncated while reading ", what);
  return v;
}
}  // namespace

void ErrorFeedback::save(std::ostream& out) const {
  put(out, kStateMagic);
  put(out, kStateVersion);
  put(out, static_cast<uint32_t>(name_.size()));
  out.write(name_.data(), static_cast<std::streamsize>(name_.size()));
  put(out, static_cast<uint32_t>(numBuffers_));
  put(out, static_cast<uint64_t>(state_.size()));
  for (const auto& [id, st] : state_) {
    put(out, id);
    put(out, static_cast<uint64_t>(st.buffers[0].size()));
    for (const auto& b : st.buffers) out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size() * 4));
  }
  GRADCOMP_CHECK_ARG(out.good(), "error-feedback state: write failed");
}

void ErrorFeedback::load(std::istream& in) {
  GRADCOMP_CHECK_ARG(get<uint32_t>(in, "magic") == kStateMagic, "error-feedback state: not a gradcomp state file");
  const auto version = get<uint32_t>(in, "version");
  GRADCOMP_CHECK_ARG(version == kStateVersion, "error-feedback state: version ", version, " is not supported");
  const auto len = get<uint32_t>(in, "name length");
  GRADCOMP_CHECK_ARG(len <= 64, "error-feedback state: policy name of ", len, " bytes");
  std::string name(len, '\0');
  in.read(name.data(), len);
  GRADCOMP_CHECK_ARG(in.good() && name == name_, "error-feedback state: file holds policy '", name, "', this is '",
                     name_, "'");
  const auto buffers = get<uint32_t>(in, "buffer count");
  GRADCOMP_CHECK_ARG(buffers == static_cast<uint32_t>(numBuffers_), "error-feedback state: ", buffers,
                     " buffers per tensor, policy '", name_, "' has ", numBuffers_);
  const auto tensors = get<uint64_t>(in, "tensor count");
  std::map<uint32_t, TensorState> loaded;
  for (uint64_t t = 0; t < tensors; ++t) {
    const auto id = get<uint32_t>(in, "tensor id");
    const auto n = get<uint64_t>(in, "element count");
    GRADCOMP_CHECK_ARG(n <= (uint64_t{1} << 40), "error-feedback state: tensor ", id, " claims ", n, " elements");
    TensorState st;
    st.buffers.assign(buffers, {});
    for (auto& b : st.buffers) {
      b.resize(n);
      in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(n * 4));
      GRADCOMP_CHECK_ARG(in.good(), "error-feedback state: truncated in tensor ", id);
    }
    GRADCOMP_CHECK_ARG(loaded.emplace(id, std::move(st)).second, "error-feedback state: tensor ", id, " twice");
  }
  state_ = std::move(loaded);
}

}  // namespace gradcomp
