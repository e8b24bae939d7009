#include "training/gradient_reducer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <istream>
#include <ostream>
#include <sstream>

#include "core/error.h"

namespace gradcomp {

std::vector<BucketPlan> planBuckets(const ParameterLayout& layout, const ReducerOptions& options) {
  GRADCOMP_CHECK_ARG(options.bucketBytes >= sizeof(float), "bucket size of ", options.bucketBytes, " bytes");
  const size_t capacity = options.bucketBytes / sizeof(float);
  std::vector<BucketPlan> plans;
  // One open bucket per kind; a tensor joins the open bucket of its kind, which closes when full.
  long open[2] = {-1, -1};
  for (size_t t = layout.size(); t-- > 0;) {
    const auto& info = layout[t];
    const bool compress = info.size >= options.minCompressElements &&
                          (options.compressOneDimensional || !info.oneDimensional());
    long& slot = open[compress ? 1 : 0];
    if (slot < 0 || plans[static_cast<size_t>(slot)].elements + info.size > capacity) {
      plans.push_back(BucketPlan{});
      plans.back().compressed = compress;
      plans.back().config = compress ? options.compressed : options.uncompressed;
      slot = static_cast<long>(plans.size() - 1);
    }
    auto& b = plans[static_cast<size_t>(slot)];
    b.tensors.push_back(t);
    b.offsets.push_back(b.elements);
    b.elements += info.size;
    if (b.elements >= capacity) slot = -1;
  }
  // Launch order = completion order in backward: a bucket is ready when its last tensor is, and buckets
  // launch strictly in index order, so a bucket of biases (whose last member, the first layer's bias,
  // comes at the very end) must not hold back the weight buckets completed before it.
  std::stable_sort(plans.begin(), plans.end(), [](const BucketPlan& a, const BucketPlan& b) {
    // Tensors are visited in decreasing index order: the smallest index is the last to be ready.
    return a.tensors.back() > b.tensors.back();
  });
  for (auto& [index, config] : options.bucketOverrides) {
    GRADCOMP_CHECK_ARG(index < plans.size(), "bucket override for bucket ", index, " but the model has ", plans.size(),
                       " buckets");
    plans[index].config = config;
  }
  for (auto& b : plans) b.config.op = ReduceOp::Average;
  return plans;
}

GradientReducer::GradientReducer(Communicator& comm, const ParameterLayout& layout, ReducerOptions options)
    : comm_(comm), layout_(layout), options_(std::move(options)), plans_(planBuckets(layout_, options_)) {
  // Refuse an unsupported (algorithm, codec, feedback) now, even if no bucket of this model needs it.
  AllreduceAlgorithm::make(options_.compressed);
  bucketOfTensor_.assign(layout_.size(), 0);
  slotOfTensor_.assign(layout_.size(), 0);
  for (size_t b = 0; b < plans_.size(); ++b) {
    algorithms_.push_back(AllreduceAlgorithm::make(plans_[b].config));  // refuses unsupported pairs here
    bufferOf_.emplace_back(plans_[b].elements);
    segmentsOf_.emplace_back();
    if (plans_[b].config.algorithm == "powersgd") {
      // In offset order (the order the tensors are packed): torch's tensor.view(shape[0], -1).
      std::vector<MatrixSegment>& segs = segmentsOf_.back();
      for (size_t i = 0; i < plans_[b].tensors.size(); ++i) {
        const ParameterTensor& t = layout_[plans_[b].tensors[i]];
        segs.push_back({plans_[b].offsets[i], t.size, t.shape.size() >= 2 ? t.shape[0] : 0});
      }
      std::sort(segs.begin(), segs.end(), [](const MatrixSegment& x, const MatrixSegment& y) { return x.offset < y.offset; });
    }
    for (size_t i = 0; i < plans_[b].tensors.size(); ++i) {
      bucketOfTensor_[plans_[b].tensors[i]] = b;
      slotOfTensor_[plans_[b].tensors[i]] = i;
    }
  }
  worker_ = std::thread([this] { workerLoop(); });
}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_.notify_all();
  worker_.join();
}

std::string GradientReducer::describe() const {
  std::ostringstream s;
  s << plans_.size() << " buckets:";
  for (size_t b = 0; b < plans_.size(); ++b)
    s << " [" << b << ": " << plans_[b].tensors.size() << " tensors, " << plans_[b].elements << " floats, "
      << algorithms_[b]->describe() << "]";
  return s.str();
}

void GradientReducer::beginStep(std::span<float> grad, uint32_t step) {
  GRADCOMP_CHECK_ARG(!inStep_, "beginStep() called twice without wait()");
  GRADCOMP_CHECK_ARG(grad.size() == layout_.totalElements(), "gradient buffer of ", grad.size(),
                     " floats for a layout of ", layout_.totalElements());
  std::lock_guard lock(mutex_);
  grad_ = grad;
  step_ = step;
  inStep_ = true;
  tensorReady_.assign(layout_.size(), 0);
  pending_.clear();
  for (const auto& p : plans_) pending_.push_back(p.tensors.size());
  nextLaunch_ = 0;
  finished_ = 0;
  report_ = {};
  report_.buckets = plans_.size();
}

void GradientReducer::markReady(size_t tensor) {
  GRADCOMP_CHECK_ARG(inStep_, "markReady() outside a step (call beginStep() first)");
  GRADCOMP_CHECK_ARG(tensor < layout_.size(), "tensor ", tensor, " of a layout with ", layout_.size());
  GRADCOMP_CHECK_ARG(!tensorReady_[tensor], "tensor ", tensor, " ('", layout_[tensor].name, "') marked ready twice");
  tensorReady_[tensor] = 1;
  const auto& info = layout_[tensor];
  const size_t b = bucketOfTensor_[tensor];
  // The copy happens on the caller's thread: the bucket is not in flight until all its tensors are in.
  std::memcpy(bufferOf_[b].data() + plans_[b].offsets[slotOfTensor_[tensor]], grad_.data() + info.offset,
              info.size * sizeof(float));
  std::lock_guard lock(mutex_);
  --pending_[b];
  if (options_.overlap) launchCompleted();
}

void GradientReducer::launchCompleted() {
  bool launched = false;
  while (nextLaunch_ < plans_.size() && pending_[nextLaunch_] == 0) {
    queue_.push_back(nextLaunch_++);
    launched = true;
  }
  if (launched) work_.notify_one();
}

ReducerStepReport GradientReducer::wait() {
  GRADCOMP_CHECK_ARG(inStep_, "wait() outside a step");
  for (size_t t = 0; t < layout_.size(); ++t)
    if (!tensorReady_[t]) markReady(t);
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  launchCompleted();
  // The collectives inside have deadlines, so this wait ends: with the buckets or with their failure.
  done_.wait(lock, [&] { return finished_ == plans_.size() || failure_; });
  if (failure_) {
    // Let the worker drain what is queued (it skips work after a failure) before rethrowing.
    done_.wait(lock, [&] { return queue_.empty(); });
    inStep_ = false;
    std::rethrow_exception(failure_);
  }
  inStep_ = false;
  report_.exposedSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report_;
}

void GradientReducer::workerLoop() {
  for (;;) {
    size_t b;
    {
      std::unique_lock lock(mutex_);
      work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_
      b = queue_.front();
      if (failure_) {  // a collective failed: the communicator is not usable for this step
        queue_.pop_front();
        done_.notify_all();
        continue;
      }
    }
    try {
      const auto t0 = std::chrono::steady_clock::now();
      const AllreduceReport r =
          algorithms_[b]->run(bufferOf_[b], comm_, AllreduceCall{static_cast<uint32_t>(b), step_, false, 0, segmentsOf_[b]});
      const auto& plan = plans_[b];
      for (size_t i = 0; i < plan.tensors.size(); ++i) {
        const auto& info = layout_[plan.tensors[i]];
        std::memcpy(grad_.data() + info.offset, bufferOf_[b].data() + plan.offsets[i], info.size * sizeof(float));
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::lock_guard lock(mutex_);
      report_.bytesSent += r.bytesSent;
      report_.bytesSentIntra += r.bytesSentIntra;
      report_.bytesSentInter += r.bytesSentInter;
      report_.uncompressedBytes += ringAllreduceBytesPerRank(plan.elements, comm_.size());
      report_.encodeSeconds += r.cost.encodeSeconds;
      report_.decodeSeconds += r.cost.decodeSeconds;
      report_.skippedNonFinite += r.skippedNonFinite;
      report_.commSeconds += seconds;
      ++finished_;
      queue_.pop_front();
    } catch (...) {
      std::lock_guard lock(mutex_);
      failure_ = std::current_exception();
      queue_.pop_front();
    }
    done_.notify_all();
  }
}

void GradientReducer::save(std::ostream& out) const {
  const uint64_t n = algorithms_.size();
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  for (const auto& a : algorithms_) a->saveState(out);
}

void GradientReducer::load(std::istream& in) {
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), sizeof n);
  GRADCOMP_CHECK_ARG(in.gcount() == sizeof n && n == algorithms_.size(), "reducer state is for ", n,
                     " buckets, this reducer has ", algorithms_.size());
  for (auto& a : algorithms_) a->loadState(in);
}

}  // namespace gradcomp
