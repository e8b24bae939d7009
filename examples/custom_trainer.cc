// A user's own data-parallel trainer, with gradcomp doing the communication: 4 workers (threads here;
// MpiSession::world() under mpirun) fit y = W x + b by least squares, each on its own samples, with
// int8 + error-feedback gradient all-reduce (or the codec given as the first argument). Exits 0 only if W
// and b are recovered; a worker's error (a bad codec, a failed peer) is printed and exits 1.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "gradcomp.h"

using namespace gradcomp;

int main(int argc, char** argv) {
  const size_t in = 32, out = 64, batch = 64;
  ParameterLayout layout;  // registered once: W [out x in], then b [out]
  layout.add("W", {out, in});
  layout.add("b", {out});
  auto truth = [&](size_t i) { return std::sin(0.37f * static_cast<float>(i)); };  // the answer, W then b
  ReducerOptions options;
  options.compressed.codec = argc > 1 ? argv[1] : "int8";
  options.compressed.errorFeedback = "ef";
  bool ok = true;
  const auto errors = runInProcess(4, [&](Communicator& comm) {
    std::vector<float> params(layout.totalElements(), 0.0f), grad(params.size());
    auto sgd = Optimizer::make("sgd:lr=0.2,momentum=0.5", params.size());
    GradientReducer reducer(comm, layout, options);
    std::mt19937 rng(static_cast<unsigned>(comm.rank()));  // each worker its own data
    std::normal_distribution<float> normal;
    std::vector<float> x(in), err(out);
    for (uint32_t step = 0; step < 300; ++step) {
      reducer.beginStep(grad, step);
      std::fill(grad.begin(), grad.end(), 0.0f);
      for (size_t s = 0; s < batch; ++s) {  // forward and backward of 1/2 mean ||W x + b - y||^2
        for (auto& v : x) v = normal(rng);
        for (size_t o = 0; o < out; ++o) {
          float pred = params[out * in + o], target = truth(out * in + o);
          for (size_t i = 0; i < in; ++i) pred += params[o * in + i] * x[i], target += truth(o * in + i) * x[i];
          err[o] = (pred - target) / batch;
          grad[out * in + o] += err[o];
          for (size_t i = 0; i < in; ++i) grad[o * in + i] += err[o] * x[i];
        }
      }
      reducer.markReady(1);  // in real backward: as each layer's gradient is done
      reducer.markReady(0);
      const ReducerStepReport report = reducer.wait();  // grad is now the average over the workers
      sgd->step(params, grad, step, {});
      if (comm.rank() == 0 && step % 100 == 0)
        std::printf("step %3u: %llu bytes sent (fp32 ring: %llu), %.0f%% of communication hidden\n", step,
                    static_cast<unsigned long long>(report.bytesSent),
                    static_cast<unsigned long long>(report.uncompressedBytes), 100 * report.hiddenShare());
    }
    double worst = 0;
    for (size_t i = 0; i < params.size(); ++i) worst = std::max(worst, double(std::abs(params[i] - truth(i))));
    if (comm.rank() == 0) std::printf("largest parameter error after 300 steps: %.2e\n", worst);
    if (worst > 1e-3) ok = false;
  });
  for (const auto& e : errors)  // one entry per worker: null, or what it threw
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& what) {
        std::fprintf(stderr, "custom_trainer: %s\n", what.what());
      }
      return 1;
    }
  return ok ? 0 : 1;
}
