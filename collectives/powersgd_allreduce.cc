// `powersgd`: PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019) as torch's powerSGD_hook computes it,
// per tensor viewed as a rows x cols matrix (AllreduceCall::rows):
//
//   M = G + E                        (E: this rank's residual, with error feedback "ef")
//   Q <- orthogonalize(Q)            (warm start: last step's Q; the first time a Philox normal matrix
//                                     keyed by (seed, tensor), the same on every rank)
//   P = M Q;       P <- sum over ranks (ring);  P <- orthogonalize(P)
//   Q = M^T P;     Q <- sum over ranks (ring)
//   out = P Q^T    (the sum of the ranks' approximations; the average op divides by W as always)
//   E = M - out / W;  Q <- Q / W kept for the next step's warm start
//
// Orthogonalization is Gram-Schmidt with an epsilon (col /= ||col|| + eps), as torch's hook for rank <= 2;
// for rank > 2 torch uses a QR factorization, whose columns differ from Gram-Schmidt's by signs only, and
// P Q^T does not change with them. Left uncompressed (a plain ring sum, no residual): a vector (rows 0),
// a matrix with one row or column, one that would not shrink by more than `min_compression` ((rows + cols)
// x r x min_compression >= rows x cols: torch's _should_compress compresses only where the product is
// strictly below), and every tensor before step `start_iter`.
// Bytes per rank: 2 (W-1)/W x 4 x (rows + cols) x r (the codec's size instead of 4 for fp16 / bf16).
//
// With batch=true (torch's batch_tensors_with_same_shape) each step of the math takes all the bucket's
// compressed matrices of one shape together (powerSgdBatches): on a device, one launch per step and
// shape instead of one per matrix, which is where a bucket of many small same-shape layers spends its
// time. P and Q keep their places in the summed buffers, so batching changes no value: the host's
// results are the same bits with it or without (tests/collectives/powersgd_test.cc).
//
// A CUDA buffer (ExecContext::device Cuda) over a host transport is summed where it lives: M, the residual,
// Q's warm start and the output stay on the device and the math runs there (collectives/low_rank_math.h:
// cuBLAS products), and only P and Q, (rows + cols) x r values per matrix, cross to the host for the ring
// sums. The other algorithms stage the whole buffer through the host instead. A tensor's state moves to
// where its next step runs, and a checkpoint holds the same bytes from either.
#include <cmath>
#include <cstring>
#include <istream>
#include <map>
#include <ostream>
#include <sstream>
#include <tuple>

#include "collectives/algorithm_registry.h"
#include "collectives/low_rank_math.h"
#include "collectives/powersgd.h"
#include "collectives/ring_primitives.h"
#include "compressors/codec_spec.h"
#include "core/error.h"
#include "kernels/scalar/philox.h"

namespace gradcomp {
namespace {

constexpr uint64_t kStateMagic = 0x31445347524f5750ull;  // "PWRGSD1" + version

struct LowRankOptions {
  uint64_t rank = 1;
  uint32_t startIter = 0;
  double minCompression = 2.0;
  float epsilon = 1e-8f;
  bool batch = false;
  std::string canonical;
};

LowRankOptions parseOptions(const std::string& text) {
  const CodecSpec spec = CodecSpec::parse("powersgd" + std::string(text.empty() ? "" : ":") + text);
  LowRankOptions o;
  o.rank = spec.getUInt("rank", 1, 1, 1024);
  o.startIter = static_cast<uint32_t>(spec.getUInt("start_iter", 0, 0, UINT32_MAX));
  o.minCompression = spec.getDouble("min_compression", 2.0, 0.0, 1e9);
  o.epsilon = static_cast<float>(spec.getDouble("epsilon", 1e-8, -1e-300, 1.0));
  // Added after PowerSGD's canonical text was compared by ranks and stored: left out at its default, so a
  // run without the option describes itself (and agrees with an older build) as before.
  o.batch = spec.getBoolOmittedAtDefault("batch", false);
  spec.checkAllUsed();
  o.canonical = spec.canonical();
  return o;
}

struct TensorState {
  uint64_t rows = 0, cols = 0, rank = 0;
  Device where = Device::Cpu;  // whose memory q and residual are (the math that last ran this tensor)
  MathBuffer q;                // cols x rank, the last step's Q / W
  MathBuffer residual;         // rows x cols (error feedback; empty without)
};

// An approximately standard normal value from twelve Philox uniforms (their sum minus 6: mean 0, variance
// 1), in plain fp32 arithmetic, so the initial Q has the same bits on every machine (no libm log / cos).
// Q is orthogonalized before use, so only its direction's randomness matters.
float normalFrom(const scalar::RngStream& s, uint64_t i) {
  float sum = 0.0f;
  for (uint64_t t = 0; t < 12; ++t) sum += scalar::uniform01(s.word(12 * i + t));
  return sum - 6.0f;
}

// The addresses f(part) of one batch's parts, and the same as read-only addresses.
template <typename Part, typename F>
std::vector<float*> addressesOf(const std::vector<Part>& parts, const std::vector<size_t>& batch, F&& f) {
  std::vector<float*> a;
  a.reserve(batch.size());
  for (size_t i : batch) a.push_back(f(parts[i]));
  return a;
}

std::vector<const float*> readOnly(const std::vector<float*>& a) { return {a.begin(), a.end()}; }

class PowerSgdAllreduce final : public AllreduceAlgorithm {
 public:
  explicit PowerSgdAllreduce(const AllreduceConfig& c)
      : AllreduceAlgorithm(withoutFeedback(c)), options_(parseOptions(c.lowRank)), efSpec_(c.errorFeedback) {
    const std::string& ef = c.errorFeedback;
    GRADCOMP_CHECK_ARG(ef == "none" || ef == "ef", "algorithm 'powersgd' keeps its own residuals: error feedback ",
                       "'none' or 'ef', got '", ef, "'");
    const std::string codec = payload_.codec().name();
    GRADCOMP_CHECK_ARG(codec == "none" || codec == "fp16" || codec == "bf16", "algorithm 'powersgd' sums P and Q ",
                       "in fp32, fp16 or bf16 (codec none, fp16, bf16), got '", payload_.codecSpec(), "'");
  }

  std::string describe() const override {
    return AllreduceAlgorithm::describe() + " lowrank=" + options_.canonical + " powersgd-ef=" + efSpec_;
  }
  bool lossy() const override { return true; }
  bool sumsDeviceBuffers() const override { return true; }

  void sum(std::span<float> data, Communicator& comm, const OpContext& op) override {
    const uint64_t n = data.size();
    std::vector<MatrixSegment> segments(op.segments.begin(), op.segments.end());
    if (segments.empty()) segments.push_back({0, n, op.rows});
    // Which matrices shrink (torch's _should_compress), and where their P and Q go in the two buffers.
    struct Part {
      MatrixSegment seg;
      uint64_t cols, r, pOffset, qOffset;
      TensorState* st;
    };
    std::vector<Part> parts;
    std::vector<MatrixSegment> exact;
    uint64_t pTotal = 0, qTotal = 0, covered = 0;
    for (size_t i = 0; i < segments.size(); ++i) {
      const MatrixSegment& m = segments[i];
      GRADCOMP_CHECK_ARG(m.offset == covered && m.count <= n - m.offset && (m.rows == 0 || m.count % m.rows == 0),
                         "powersgd: segment ", i, " of tensor ", op.tensorId, " (offset ", m.offset, ", ", m.count,
                         " elements, ", m.rows, " rows) does not continue the bucket's ", n, " elements as a matrix");
      covered += m.count;
      const uint64_t rows = m.rows, cols = rows ? m.count / rows : 0;
      const uint64_t r = std::min({options_.rank, rows, cols});
      const bool compress = rows > 1 && cols > 1 && op.step >= options_.startIter &&
                            static_cast<double>((rows + cols) * r) * options_.minCompression <
                                static_cast<double>(rows * cols);
      if (!compress) {
        exact.push_back(m);
        continue;
      }
      parts.push_back({m, cols, r, pTotal, qTotal, &stateFor(op.tensorId, static_cast<uint32_t>(i), rows, cols, r)});
      pTotal += rows * r;
      qTotal += cols * r;
    }
    GRADCOMP_CHECK_ARG(covered == n, "powersgd: the segments of tensor ", op.tensorId, " cover ", covered, " of its ",
                       n, " elements");
    LowRankMath& math = mathFor(op.exec);
    // The tensors left as they are: one exact ring sum of all of them together (from the device: their
    // elements gathered on the host).
    if (!exact.empty()) {
      uint64_t at = 0;
      for (const MatrixSegment& m : exact) at += m.count;
      exactBuffer_.resize(at);
      at = 0;
      for (const MatrixSegment& m : exact) {
        math.download(data.data() + m.offset, m.count, exactBuffer_.data() + at);
        at += m.count;
      }
      sumRaw(exactBuffer_, comm, op, 0);
      at = 0;
      for (const MatrixSegment& m : exact) {
        math.upload(exactBuffer_.data() + at, m.count, data.data() + m.offset);
        at += m.count;
      }
    }
    if (parts.empty()) return;
    const bool ef = efSpec_ == "ef";
    for (const Part& part : parts) moveState(*part.st, math);
    // The working matrices in the math's memory: M (the bucket), P and Q; p_ and q_ are their host copies
    // for the ring (on the host math, the same memory).
    Work& work = math.device() == Device::Cpu ? hostWork_ : deviceWork_;
    float* m = reserve(work.m, n, math);
    p_.resize(pTotal);
    q_.resize(qTotal);
    float* p = math.device() == Device::Cpu ? p_.data() : reserve(work.p, pTotal, math);
    float* q = math.device() == Device::Cpu ? q_.data() : reserve(work.q, qTotal, math);
    std::vector<MatrixShape> shapes;
    for (const Part& part : parts) shapes.push_back({part.seg.rows, part.cols, part.r});
    const std::vector<std::vector<size_t>> batches = powerSgdBatches(shapes, options_.batch);
    // Each batch's matrices share the first one's shape.
    auto each = [&](const std::vector<size_t>& batch, auto&& f) { return addressesOf(parts, batch, f); };
    for (const auto& batch : batches) {
      const Part& shape = parts[batch.front()];
      const auto mParts = each(batch, [&](const Part& x) { return m + x.seg.offset; });
      const auto qStates = each(batch, [](const Part& x) { return x.st->q.get(); });
      const auto pParts = each(batch, [&](const Part& x) { return p + x.pOffset; });
      const auto grads = readOnly(each(batch, [&](const Part& x) { return data.data() + x.seg.offset; }));
      const auto residuals = ef ? readOnly(each(batch, [](const Part& x) { return x.st->residual.get(); }))
                                : std::vector<const float*>();
      math.add(grads, residuals, shape.seg.count, mParts);
      math.orthogonalizeColumns(qStates, shape.cols, shape.r, options_.epsilon);
      math.matmul(readOnly(mParts), shape.seg.rows, shape.cols, readOnly(qStates), shape.r, pParts);
    }
    math.download(p, pTotal, p_.data());
    sumFactor(p_, comm, op, 2);
    math.upload(p_.data(), pTotal, p);
    for (const auto& batch : batches) {
      const Part& shape = parts[batch.front()];
      const auto pParts = each(batch, [&](const Part& x) { return p + x.pOffset; });
      math.orthogonalizeColumns(pParts, shape.seg.rows, shape.r, options_.epsilon);
      math.matmulTransposedA(readOnly(each(batch, [&](const Part& x) { return m + x.seg.offset; })), shape.seg.rows,
                             shape.cols, readOnly(pParts), shape.r,
                             each(batch, [&](const Part& x) { return q + x.qOffset; }));
    }
    math.download(q, qTotal, q_.data());
    sumFactor(q_, comm, op, 4);
    math.upload(q_.data(), qTotal, q);
    const float w = static_cast<float>(comm.size());
    for (const auto& batch : batches) {
      const Part& shape = parts[batch.front()];
      const auto outs = each(batch, [&](const Part& x) { return data.data() + x.seg.offset; });
      const auto qParts = readOnly(each(batch, [&](const Part& x) { return q + x.qOffset; }));
      math.matmulTransposedB(readOnly(each(batch, [&](const Part& x) { return p + x.pOffset; })), shape.seg.rows,
                             shape.r, qParts, shape.cols, outs);
      if (ef)
        math.residual(readOnly(each(batch, [&](const Part& x) { return m + x.seg.offset; })), readOnly(outs), w,
                      shape.seg.count, each(batch, [](const Part& x) { return x.st->residual.get(); }));
      math.divide(qParts, w, shape.cols * shape.r, each(batch, [](const Part& x) { return x.st->q.get(); }));
    }
    math.finish();
  }

  // The matrices the prediction models: config.modelMatrices, or one square matrix of n elements.
  std::vector<MatrixSegment> modelled(size_t n) const {
    if (!config_.modelMatrices.empty()) return config_.modelMatrices;
    const uint64_t side = static_cast<uint64_t>(std::sqrt(static_cast<double>(n)));
    return {{0, side * side, side}};
  }
  // (elements P and Q hold, elements left exact) over the modelled matrices.
  std::pair<uint64_t, uint64_t> factorElements(size_t n) const {
    uint64_t factors = 0, exact = 0;
    for (const MatrixSegment& m : modelled(n)) {
      const uint64_t rows = m.rows, cols = rows ? m.count / rows : 0, r = std::min({options_.rank, rows, cols});
      if (rows > 1 && cols > 1 && static_cast<double>((rows + cols) * r) * options_.minCompression < static_cast<double>(rows * cols))
        factors += (rows + cols) * r;
      else
        exact += m.count;
    }
    return {factors, exact};
  }
  // Two rings of the factors (P, then Q: 2 (W-1)/W x s x (rows + cols) x r per matrix) and one of the exact
  // tensors; each ring pays its latency.
  double predictSeconds(size_t n, int ranks, int ranksPerNode, const LinkModel& links) const override {
    if (ranks <= 1) return 0;
    const LinkSpec& l = ranksPerNode < ranks ? links.inter : links.intra;
    const auto [factors, exact] = factorElements(n);
    const size_t w = static_cast<size_t>(ranks);
    double t = 2.0 * (ranks - 1) * l.seconds(encodedBytes(payload_, (factors / 2 + w - 1) / w));
    t *= 2;  // P and Q (modelled as two halves of the factors)
    if (exact) t += 2.0 * (ranks - 1) * l.seconds((exact + w - 1) / w * sizeof(float));
    return t;
  }
  CodecWork codecWork(size_t n, int ranks, int) const override {
    if (payload_.raw() || ranks <= 1) return {};
    const double factors = static_cast<double>(factorElements(n).first);
    return {factors * 2 / ranks, factors * 2};
  }

  void saveState(std::ostream& out) override {
    AllreduceAlgorithm::saveState(out);
    auto put = [&](const void* p, size_t bytes) { out.write(static_cast<const char*>(p), static_cast<std::streamsize>(bytes)); };
    const uint64_t count = states_.size();
    put(&kStateMagic, 8);
    put(&count, 8);
    for (const auto& [id, st] : states_) {
      const uint64_t header[4] = {id, st.rows, st.cols, st.rank};
      put(header, sizeof header);
      for (const MathBuffer* b : {&st.q, &st.residual}) {
        const std::vector<float> bytes = onHost(*b, st.where);
        put(bytes.data(), bytes.size() * sizeof(float));
      }
    }
  }

  void loadState(std::istream& in) override {
    AllreduceAlgorithm::loadState(in);
    auto get = [&](void* p, size_t bytes, const char* what) {
      in.read(static_cast<char*>(p), static_cast<std::streamsize>(bytes));
      GRADCOMP_CHECK_ARG(static_cast<size_t>(in.gcount()) == bytes, "powersgd state: truncated ", what);
    };
    uint64_t magic = 0, count = 0;
    get(&magic, 8, "header");
    GRADCOMP_CHECK_ARG(magic == kStateMagic, "powersgd state: not a PowerSGD state (another algorithm's checkpoint?)");
    get(&count, 8, "header");
    GRADCOMP_CHECK_ARG(count <= (uint64_t{1} << 20), "powersgd state: ", count, " tensors is implausible");
    std::map<uint64_t, TensorState> loaded;
    for (uint64_t t = 0; t < count; ++t) {
      uint64_t header[4];
      get(header, sizeof header, "tensor header");
      TensorState st;
      st.rows = header[1], st.cols = header[2], st.rank = header[3];
      GRADCOMP_CHECK_ARG(st.rank >= 1 && st.rank <= options_.rank &&
                             st.rows >= st.rank && st.cols >= st.rank && st.rows <= (uint64_t{1} << 31) &&
                             st.cols <= (uint64_t{1} << 31) && st.rows * st.cols <= (uint64_t{1} << 34),
                         "powersgd state: tensor ", header[0], " has an invalid shape ", st.rows, " x ", st.cols,
                         " rank ", st.rank, " (this algorithm's rank is ", options_.rank, ")");
      st.q = host_->allocate(st.cols * st.rank);
      st.residual = host_->allocate(efSpec_ == "ef" ? st.rows * st.cols : 0);
      get(st.q.get(), st.q.size * sizeof(float), "Q");
      get(st.residual.get(), st.residual.size * sizeof(float), "residual");
      loaded[header[0]] = std::move(st);
    }
    states_ = std::move(loaded);
  }

 private:
  static AllreduceConfig withoutFeedback(AllreduceConfig c) {
    c.errorFeedback = "none";  // the P / Q carrier has none; PowerSGD's own residuals are kept here
    return c;
  }

  // One state per (tensor id, segment): a bucket's matrices keep their own Q and residual.
  static uint64_t keyOf(uint32_t tensorId, uint32_t segment) { return (uint64_t{tensorId} << 32) | segment; }

  TensorState& stateFor(uint32_t tensorId, uint32_t segment, uint64_t rows, uint64_t cols, uint64_t r) {
    TensorState& st = states_[keyOf(tensorId, segment)];
    if (st.rows == rows && st.cols == cols && st.rank == r) return st;
    GRADCOMP_CHECK_ARG(st.rows == 0, "powersgd: matrix ", segment, " of tensor ", tensorId, " was ", st.rows, " x ",
                       st.cols, " and is now ", rows, " x ", cols, " (a tensor id and segment name one matrix)");
    st.rows = rows, st.cols = cols, st.rank = r, st.where = Device::Cpu;
    const std::vector<float> q = powerSgdInitialQ(config_.seed, tensorId, segment, cols, r);
    st.q = host_->allocate(q.size());
    std::copy(q.begin(), q.end(), st.q.get());
    st.residual = host_->allocate(efSpec_ == "ef" ? rows * cols : 0);
    return st;
  }

  // The math for a buffer where `exec` says: the host's, or the device math of exec's device and stream
  // (made on first use; a call on another device or stream first brings every state back to the host).
  LowRankMath& mathFor(const ExecContext& exec) {
    if (exec.device == Device::Cpu) return *host_;
    if (device_ && (deviceExec_.cudaDevice != exec.cudaDevice || deviceExec_.cudaStream != exec.cudaStream)) {
      for (auto& entry : states_) moveState(entry.second, *host_);
      device_.reset();
    }
    if (!device_) {
      device_ = makeDeviceLowRankMath(exec);
      deviceExec_ = exec;
      deviceWork_ = {};
    }
    return *device_;
  }

  LowRankMath& mathOf(Device where) { return where == Device::Cpu ? *host_ : *device_; }

  // A state's buffer as host values.
  std::vector<float> onHost(const MathBuffer& b, Device where) {
    std::vector<float> values(b.size);
    mathOf(where).download(b.get(), b.size, values.data());
    return values;
  }

  // Moves a tensor's Q and residual into `to`'s memory (through the host), bits unchanged.
  void moveState(TensorState& st, LowRankMath& to) {
    if (st.where == to.device()) return;
    for (MathBuffer* b : {&st.q, &st.residual}) {
      const std::vector<float> values = onHost(*b, st.where);
      MathBuffer moved = to.allocate(values.size());
      to.upload(values.data(), values.size(), moved.get());
      *b = std::move(moved);
    }
    st.where = to.device();
  }

  // A working buffer of at least n floats in `math`'s memory.
  float* reserve(MathBuffer& b, size_t n, LowRankMath& math) {
    if (b.size < n) b = math.allocate(n);
    return b.get();
  }

  void sumRaw(std::span<float> data, Communicator& comm, const OpContext& op, uint32_t phase) {
    const RingContext rc{comm, op.sequence, 1 + phase, op.tensorId, op.step, config_.seed, &scratch_};
    ringReduceScatterRaw(rc, data, config_.chunkBytes);
    ringAllgatherRaw(rc, data, config_.chunkBytes);
  }

  // P or Q summed over the ranks: raw fp32, or the compressed ring through fp16 / bf16. Tag phases: the
  // exact tensors 1-2, P 3-4, Q 5-6.
  void sumFactor(std::vector<float>& f, Communicator& comm, const OpContext& op, uint32_t phase) {
    if (payload_.raw()) {
      sumRaw(f, comm, op, phase);
      return;
    }
    const RingContext rc{comm, op.sequence, 1 + phase, op.tensorId, op.step, config_.seed, &scratch_};
    ringReduceScatterCoded(rc, f, payload_, config_.chunkBytes);
    ringAllgatherCoded(rc, f, payload_, config_.chunkBytes);
  }

  // The working matrices of one math: M (the bucket) and, on a device, P and Q.
  struct Work {
    MathBuffer m, p, q;
  };

  LowRankOptions options_;
  std::string efSpec_;
  std::unique_ptr<LowRankMath> host_ = makeHostLowRankMath();
  std::unique_ptr<LowRankMath> device_;  // made by the first call on a CUDA buffer
  ExecContext deviceExec_;
  Work hostWork_, deviceWork_;
  std::map<uint64_t, TensorState> states_;
  std::vector<float> p_, q_, exactBuffer_;  // the host copies the rings sum
};

}  // namespace

std::vector<float> powerSgdInitialQ(uint64_t seed, uint32_t tensorId, uint32_t segment, uint64_t cols, uint64_t rank) {
  const auto stream = scalar::RngStream::make(seed ^ 0x51494e4954ull /* "QINIT" */, 0, segment, tensorId);
  std::vector<float> q(cols * rank);
  for (uint64_t i = 0; i < q.size(); ++i) q[i] = normalFrom(stream, i);
  return q;
}

std::vector<std::vector<size_t>> powerSgdBatches(std::span<const MatrixShape> shapes, bool batch) {
  std::vector<std::vector<size_t>> batches;
  std::map<std::tuple<uint64_t, uint64_t, uint64_t>, size_t> batchOfShape;  // shape -> its index in batches
  for (size_t i = 0; i < shapes.size(); ++i) {
    const MatrixShape& s = shapes[i];
    if (batch) {
      const auto [at, added] = batchOfShape.try_emplace({s.rows, s.cols, s.rank}, batches.size());
      if (!added) {
        batches[at->second].push_back(i);
        continue;
      }
    }
    batches.push_back({i});
  }
  return batches;
}

std::unique_ptr<AllreduceAlgorithm> makePowerSgdAllreduce(const AllreduceConfig& c) {
  return std::make_unique<PowerSgdAllreduce>(c);
}

}  // namespace gradcomp
