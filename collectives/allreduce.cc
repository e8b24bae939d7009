#include "collectives/allreduce.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "collectives/agreement.h"
#include "collectives/algorithm_registry.h"
#include "collectives/host_staging.h"
#include "collectives/ring_primitives.h"
#include "compressors/codec_spec.h"
#include "core/error.h"

namespace gradcomp {
namespace {

struct Entry {
  const char* name;
  std::unique_ptr<AllreduceAlgorithm> (*make)(const AllreduceConfig&);
};
constexpr Entry kAlgorithms[] = {
    {"vendor", makeVendorAllreduce},       {"ring", makeRingAllreduce}, {"allgather", makeAllgatherAllreduce},
    {"randomk", makeRandomKAllreduce},     {"hierarchical", makeHierarchicalAllreduce},
    {"tree", makeTreeAllreduce},           {"powersgd", makePowerSgdAllreduce},
};

bool skipsNonFinite(const std::string& efSpec) {
  return CodecSpec::parse(efSpec).getChoice("nonfinite", "error", {"error", "skip"}) == "skip";
}

double relativeL2(std::span<const float> x, std::span<const float> exact) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - exact[i];
    err += d * d;
    norm += static_cast<double>(exact[i]) * exact[i];
  }
  return norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
}

}  // namespace

const char* reduceOpName(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : "avg"; }

ReduceOp parseReduceOp(const std::string& name) {
  if (name == "sum") return ReduceOp::Sum;
  if (name == "avg" || name == "average" || name == "mean") return ReduceOp::Average;
  GRADCOMP_THROW(InvalidArgument, "unknown reduction '", name, "' (sum or avg)");
}

std::vector<std::string> AllreduceAlgorithm::names() {
  std::vector<std::string> n;
  for (const auto& e : kAlgorithms) n.emplace_back(e.name);
  return n;
}

std::unique_ptr<AllreduceAlgorithm> AllreduceAlgorithm::make(const AllreduceConfig& config) {
  GRADCOMP_CHECK_ARG(config.chunkBytes >= sizeof(float), "chunk size must be at least 4 bytes, got ",
                     config.chunkBytes);
  for (const auto& e : kAlgorithms)
    if (config.algorithm == e.name) return e.make(config);
  std::ostringstream known;
  for (const auto& e : kAlgorithms) known << ' ' << e.name;
  GRADCOMP_THROW(InvalidArgument, "unknown all-reduce algorithm '", config.algorithm, "' (known:", known.str(), ")");
}

AllreduceAlgorithm::AllreduceAlgorithm(AllreduceConfig config)
    : config_(std::move(config)), payload_(config_.codec, config_.errorFeedback) {}

std::string AllreduceAlgorithm::describe() const {
  std::ostringstream o;
  o << config_.algorithm;
  if (config_.algorithm == "hierarchical") o << '/' << config_.interAlgorithm;
  o << " codec=" << payload_.canonicalCodecSpec() << " ef=" << payload_.canonicalErrorFeedbackSpec() << ' '
    << reduceOpName(config_.op) << " seed=" << config_.seed << " chunk=" << config_.chunkBytes;
  return o.str();
}

void AllreduceAlgorithm::requireLosslessOnly(const char* why) const {
  GRADCOMP_CHECK_ARG(payload_.raw(), "algorithm '", config_.algorithm, "' cannot carry codec '", payload_.codecSpec(),
                     "' with error feedback '", payload_.errorFeedbackSpec(), "': ", why);
}

void AllreduceAlgorithm::requireReencodable() const {
  GRADCOMP_CHECK_ARG(payload_.codec().traits().reencodable, "algorithm '", config_.algorithm,
                     "' cannot carry codec '", payload_.codecSpec(),
                     "': it re-encodes partial sums at every hop, which a sparse top-k/threshold payload cannot "
                     "represent (use algorithm 'allgather')");
}

void AllreduceAlgorithm::requireSourceFeedback() const {
  const std::string& ef = payload_.errorFeedback().name();
  GRADCOMP_CHECK_ARG(ef == "none" || ef == "ef", "algorithm '", config_.algorithm, "' cannot use error feedback '", ef,
                     "' with codec '", payload_.codecSpec(),
                     "': it compresses partial sums per hop, and ef21/dgc need each rank's own gradient (use "
                     "'allgather' or 'randomk', or error feedback 'ef')");
}

EncodeContext AllreduceAlgorithm::encodeContext(const Communicator& comm, const OpContext& op, size_t segment) const {
  return {config_.seed, static_cast<uint32_t>(comm.rank()), op.step, segmentKey(op.tensorId, segment), 0};
}

AllreduceReport AllreduceAlgorithm::run(std::span<float> data, Communicator& comm, const AllreduceCall& call,
                                        const ExecContext& exec) {
  // The buffer's own steps (the NaN/Inf scan, the zeros of nonfinite=skip, the average, the check's
  // copies) run where it lives.
  const bool onDevice = exec.device == Device::Cuda;
  if (onDevice && !comm.deviceBuffers() && !sumsDeviceBuffers())
    return runWithHostStaging(data, exec, [&](std::span<float> host) { return run(host, comm, call, {}); });
  if (onDevice && !comm.deviceBuffers()) requireCudaDevice(exec, "all-reduce '" + config_.algorithm + "'");
  if (comm.deviceBuffers() && config_.algorithm != "vendor")
    GRADCOMP_THROW(BackendUnavailable, "algorithm '", config_.algorithm, "' on the ", comm.transportName(),
                   " transport needs CUDA reduction and codec kernels that are not dispatched yet; use 'vendor' there, "
                   "or the MPI transport with a CUDA ExecContext (host staging)");
  GRADCOMP_CHECK_ARG(call.tensorId <= kMaxTensorId, "tensor id ", call.tensorId, " exceeds ", kMaxTensorId);
  // Taken before anything reads the communicator (its traffic counters included): a second thread is
  // refused here, before it can disturb the operation that holds it.
  const Communicator::OperationScope scope(comm, "all-reduce");

  AllreduceReport report;
  const TrafficStats& t = comm.traffic();
  const uint64_t control0 = t.totalBytesSent();
  PayloadCodec& codec = codecInUse();
  const CodecCost cost0 = codec.cost();

  OpDescriptor op;
  op.operation = "all-reduce";
  op.sequence = scope.sequence();
  op.count = data.size();
  op.tensorId = call.tensorId;
  op.step = call.step;
  op.config = describe() + (call.check ? " check" : "") + (call.rows ? " rows=" + std::to_string(call.rows) : "");
  if (!call.segments.empty()) {
    // The bucket's matrix layout is part of what ranks must agree on: a 64-bit FNV-1a of it.
    uint64_t h = 1469598103934665603ull;
    for (const MatrixSegment& m : call.segments)
      for (uint64_t v : {m.offset, m.count, m.rows}) h = (h ^ v) * 1099511628211ull;
    op.config += " segments=" + std::to_string(call.segments.size()) + ":" + std::to_string(h);
  }
  // Lossy paths reject NaN/Inf; find them first so every rank applies the same policy. The scan is
  // part of what compression costs, so it is counted as encode time.
  double scanSeconds = 0;
  if (lossy()) {
    const auto t0 = Clock::now();
    const uint64_t bad = onDevice ? firstNonFiniteOnDevice(data, exec) : firstNonFinite(data);
    if (bad != EncodeResult::kNoIndex) op.nonFiniteIndex = bad;
    scanSeconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const NonFiniteInput bad = agreeOnOperation(comm, op);
  report.sequence = op.sequence;
  if (bad.rank >= 0) {
    if (!skipsNonFinite(payload_.errorFeedbackSpec()))
      throw NonFiniteError(__FILE__, __LINE__,
                           detail::concat("all-reduce #", op.sequence, " (", describe(), "): rank ", bad.rank,
                                          " has a non-finite gradient at index ", bad.index, " of tensor ",
                                          call.tensorId, " (seen by rank ", comm.rank(), ")"),
                           call.tensorId, bad.index);
    if (op.nonFiniteIndex != OpDescriptor::kNoNonFinite) {
      // nonfinite=skip: this rank contributes zeros
      if (onDevice)
        zeroOnDevice(data, exec);
      else
        std::fill(data.begin(), data.end(), 0.0f);
      report.skippedNonFinite = 1;
    }
  }

  const uint64_t intra0 = t.bytesSent(LinkClass::Intra), inter0 = t.bytesSent(LinkClass::Inter);
  report.controlBytesSent = intra0 + inter0 - control0;
  std::vector<float> reference;
  if (call.check) reference = onDevice ? copyToHost(data, exec) : std::vector<float>(data.begin(), data.end());

  sum(data, comm, {op.sequence, call.tensorId, call.step, call.rows, call.segments, onDevice ? exec : ExecContext{}});
  if (config_.op == ReduceOp::Average) {
    const float p = static_cast<float>(comm.size());
    if (onDevice)
      divideOnDevice(data, p, exec);
    else
      for (float& v : data) v /= p;
  }
  if (!onDevice) codec.errorFeedback().finish(segmentKey(call.tensorId, 0), data);

  report.bytesSentIntra = t.bytesSent(LinkClass::Intra) - intra0;
  report.bytesSentInter = t.bytesSent(LinkClass::Inter) - inter0;
  report.bytesSent = report.bytesSentIntra + report.bytesSentInter;
  const CodecCost& c = codec.cost();
  report.cost = {c.encodeSeconds - cost0.encodeSeconds + scanSeconds, c.decodeSeconds - cost0.decodeSeconds,
                 c.saturated - cost0.saturated, c.skipped - cost0.skipped, c.encodes - cost0.encodes};

  if (call.check) {
    // The exact fp32 reference: the uncompressed ring on the original inputs, not counted as traffic.
    comm.traffic().setCounting(false);
    try {
      const RingContext rc{comm, op.sequence, 0x40, call.tensorId, call.step, config_.seed, &scratch_};
      ringReduceScatterRaw(rc, reference, config_.chunkBytes);
      ringAllgatherRaw(rc, reference, config_.chunkBytes);
    } catch (...) {
      comm.traffic().setCounting(true);
      throw;
    }
    comm.traffic().setCounting(true);
    if (config_.op == ReduceOp::Average) {
      const float p = static_cast<float>(comm.size());
      for (float& v : reference) v /= p;
    }
    report.relativeError = onDevice ? relativeL2(copyToHost(data, exec), reference) : relativeL2(data, reference);
  }
  return report;
}

void AllreduceAlgorithm::saveState(std::ostream& out) { errorFeedback().save(out); }
void AllreduceAlgorithm::loadState(std::istream& in) { errorFeedback().load(in); }

size_t encodedBytes(const PayloadCodec& codec, size_t n) {
  if (codec.raw()) return n * sizeof(float);
  return codec.maxBytes(n, codec.steadyStep());
}

}  // namespace gradcomp
