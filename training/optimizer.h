// Optimizers over the flat parameter buffer, built from a spec string:
//   sgd:lr=0.1,momentum=0.9,nesterov=false,weight_decay=0
//   adam:lr=0.001,beta1=0.9,beta2=0.999,eps=1e-8,weight_decay=0
//   onebit-adam:lr=0.001,beta1=0.9,beta2=0.999,eps=1e-8,warmup=100
//
// 1-bit Adam (Tang et al., ICML 2021): for `warmup` steps it is Adam on the all-reduced gradient. Then
// the variance is frozen, and each worker updates its momentum with its own (local) gradient and
// all-reduces the momentum through a compressed all-reduce with error feedback (the trainer's codec,
// sign by default); the update is momentum / (sqrt(frozen variance) + eps). Because it communicates
// the momentum and not the gradient, it tells the trainer so (reducesGradients) and takes the
// momentum all-reduce as a callback.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace gradcomp {

// Averages a buffer over the workers in place (the trainer supplies it; compressed for 1-bit Adam).
using MomentumAllreduce = std::function<void(std::span<float>)>;

class Optimizer {
 public:
  static std::unique_ptr<Optimizer> make(const std::string& spec, size_t numParameters);
  virtual ~Optimizer() = default;
  virtual std::string describe() const = 0;

  // True: the trainer all-reduces (averages) the gradient before step(). False (1-bit Adam after its
  // warm-up): step() gets the local gradient and communicates through `allreduce`.
  virtual bool reducesGradients(uint64_t step) const { (void)step; return true; }
  virtual void step(std::span<float> params, std::span<const float> grad, uint64_t step,
                    const MomentumAllreduce& allreduce) = 0;

  // The optimizer's state (momenta, step counts) for checkpoints; load() checks the kind and size.
  void save(std::ostream& out) const;
  void load(std::istream& in);

 protected:
  Optimizer(std::string kind, size_t numParameters, int numBuffers);
  std::string kind_;
  std::vector<std::vector<float>> buffers_;  // per-element state
};

}  // namespace gradcomp
