// A DDP-style gradient reducer, for gradcomp's trainer and for anyone's own C++ trainer.
//
// Parameters are registered once (a ParameterLayout). Tensors are packed into buckets in reverse order
// (the order backward produces them), up to `bucketBytes` each; tensors that are one-dimensional or
// smaller than `minCompressElements` go to separate, uncompressed buckets (compressing a bias costs
// more than it saves, and quantizing norms hurts). During backward the trainer calls markReady(t) as
// each tensor's gradient is final; the tensor is copied into its bucket, and a bucket whose tensors are
// all ready is all-reduced (averaged) on the reducer's communication thread while backward goes on.
// Buckets are launched strictly in index order, so every rank issues the same collectives in the same
// order. wait() blocks until all buckets are reduced and copied back, rethrowing any failure (a peer
// that died or timed out, a mismatch found by the agreement check), and reports the step.
//
//   GradientReducer reducer(comm, model.layout(), options);
//   reducer.beginStep(grad, step);
//   model.lossAndGradient(batch, grad, [&](size_t t) { reducer.markReady(t); });
//   auto report = reducer.wait();   // grad now holds the average over ranks
//   optimizer.step(params, grad, step, {});
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <iosfwd>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "collectives/allreduce.h"
#include "training/parameter_layout.h"

namespace gradcomp {

struct ReducerOptions {
  size_t bucketBytes = size_t{25} << 20;
  AllreduceConfig compressed;    // large multi-dimensional tensors (the op is always Average)
  AllreduceConfig uncompressed;  // small or 1-D tensors: codec none
  size_t minCompressElements = 1024;
  bool compressOneDimensional = false;
  bool overlap = true;           // false: every bucket is launched at wait() (the no-overlap baseline)
  std::map<size_t, AllreduceConfig> bucketOverrides;  // per bucket index (after planning)
};

struct BucketPlan {
  std::vector<size_t> tensors;  // tensor indices, in the order they are packed
  std::vector<size_t> offsets;  // each tensor's offset inside the bucket
  size_t elements = 0;
  bool compressed = false;
  AllreduceConfig config;
};

// Plans the buckets for a layout (pure: the same on every rank for the same layout and options), in the
// order backward completes them.
std::vector<BucketPlan> planBuckets(const ParameterLayout& layout, const ReducerOptions& options);

// fp32 bytes one rank sends in an uncompressed ring all-reduce of n elements: 2 (P-1)/P x 4n. The
// baseline of every compression ratio the trainer reports.
inline uint64_t ringAllreduceBytesPerRank(size_t elements, int ranks) {
  return ranks > 1 ? 2 * (static_cast<uint64_t>(ranks) - 1) * elements * sizeof(float) / static_cast<uint64_t>(ranks) : 0;
}

struct ReducerStepReport {
  uint64_t bytesSent = 0, bytesSentIntra = 0, bytesSentInter = 0;  // this rank, this step
  uint64_t uncompressedBytes = 0;  // the fp32 bytes a ring all-reduce of the same buckets would send
  double encodeSeconds = 0, decodeSeconds = 0;
  double commSeconds = 0;     // wall time of the bucket all-reduces (codec time included)
  double exposedSeconds = 0;  // time wait() blocked: the communication backward did not hide
  uint64_t skippedNonFinite = 0;
  size_t buckets = 0;
  double hiddenShare() const { return commSeconds > 0 ? std::max(0.0, 1.0 - exposedSeconds / commSeconds) : 1.0; }
};

class GradientReducer {
 public:
  GradientReducer(Communicator& comm, const ParameterLayout& layout, ReducerOptions options);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  const std::vector<BucketPlan>& buckets() const { return plans_; }
  const AllreduceAlgorithm& algorithm(size_t bucket) const { return *algorithms_.at(bucket); }
  std::string describe() const;

  // Starts a step on the flat gradient buffer `grad` (layout().totalElements() floats; must stay valid
  // until wait() returns).
  void beginStep(std::span<float> grad, uint32_t step);
  // Tensor t's gradient is final. Marking a tensor twice in a step is an error.
  void markReady(size_t tensor);
  // Marks every tensor not yet marked, waits for all buckets, copies the averages back into grad.
  ReducerStepReport wait();

  // Error-feedback state of every bucket, for checkpoints.
  void save(std::ostream& out) const;
  void load(std::istream& in);

 private:
  void launchCompleted();  // with mutex_ held
  void workerLoop();

  Communicator& comm_;
  ParameterLayout layout_;
  ReducerOptions options_;
  std::vector<BucketPlan> plans_;
  std::vector<std::unique_ptr<AllreduceAlgorithm>> algorithms_;
  std::vector<std::vector<float>> bufferOf_;
  // Each bucket's tensors as matrices (rows = the tensor's first dimension), for powersgd's buckets;
  // empty for the others.
  std::vector<std::vector<MatrixSegment>> segmentsOf_;
  std::vector<size_t> bucketOfTensor_, slotOfTensor_;

  // Per step.
  std::span<float> grad_;
  uint32_t step_ = 0;
  bool inStep_ = false;
  std::vector<char> tensorReady_;
  std::vector<size_t> pending_;  // tensors not yet ready, per bucket
  size_t nextLaunch_ = 0;
  size_t finished_ = 0;
  ReducerStepReport report_;

  std::mutex mutex_;
  std::condition_variable work_, done_;
  std::deque<size_t> queue_;
  std::exception_ptr failure_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace gradcomp
