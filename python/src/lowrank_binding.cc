// gradcomp._C.powersgd_steps / powersgd_initial_q: gradcomp's `powersgd` all-reduce on in-process ranks,
// step by step, so Python can compare it with torch's powerSGD_hook math on the same gradients and the
// same initial Q (tests/python/test_powersgd.py). A checking tool, not the training path.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <chrono>

#include <cstring>
#include <exception>
#include <vector>

#include "bindings.h"
#include "collectives/allreduce.h"
#include "collectives/inprocess_communicator.h"
#include "collectives/powersgd.h"
#include "core/error.h"
#include "kernels/cpu/low_rank.h"
#include "tensor_args.h"

namespace gradcomp::python {

namespace {

// grads: steps x ranks x (rows * cols) float32, row-major; out: steps x (rows * cols), the sum each step
// (identical on every rank, checked).
void powerSgdSteps(const FloatsIn& grads, uint64_t steps, uint64_t ranks, uint64_t rows, const std::string& lowRank,
                   const std::string& errorFeedback, const std::string& codec, uint64_t seed, const FloatsOut& out) {
  GRADCOMP_CHECK_ARG(steps >= 1 && ranks >= 1 && ranks <= 64 && rows >= 1, "powersgd_steps: steps >= 1, ranks in [1, 64], rows >= 1");
  GRADCOMP_CHECK_ARG(grads.size() % (steps * ranks) == 0, "powersgd_steps: ", grads.size(),
                     " gradient values are not steps x ranks tensors");
  const uint64_t n = grads.size() / (steps * ranks);
  GRADCOMP_CHECK_ARG(n % rows == 0, "powersgd_steps: ", n, " elements are not a matrix of ", rows, " rows");
  GRADCOMP_CHECK_ARG(out.size() == steps * n, "powersgd_steps: out holds ", out.size(), " values, need ", steps * n);
  AllreduceConfig cfg;
  cfg.algorithm = "powersgd";
  cfg.codec = codec;
  cfg.errorFeedback = errorFeedback;
  cfg.lowRank = lowRank;
  cfg.seed = seed;
  std::vector<std::vector<float>> results(ranks, std::vector<float>(steps * n));
  const float* g = grads.data();
  nb::gil_scoped_release release;
  const auto errors = runInProcess(static_cast<int>(ranks), [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(cfg);
    const auto r = static_cast<uint64_t>(comm.rank());
    for (uint64_t s = 0; s < steps; ++s) {
      std::vector<float> x(g + (s * ranks + r) * n, g + (s * ranks + r + 1) * n);
      algo->run(x, comm, {0, static_cast<uint32_t>(s), false, rows});
      std::copy(x.begin(), x.end(), results[r].begin() + static_cast<std::ptrdiff_t>(s * n));
    }
  });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (uint64_t r = 1; r < ranks; ++r)
    GRADCOMP_CHECK(results[r] == results[0], Error, "powersgd_steps: rank ", r, " holds other bits than rank 0");
  std::copy(results[0].begin(), results[0].end(), out.data());
}

void powerSgdInitialQInto(uint64_t seed, uint32_t tensorId, uint64_t cols, uint64_t rank, const FloatsOut& out) {
  GRADCOMP_CHECK_ARG(out.size() == cols * rank, "powersgd_initial_q: out holds ", out.size(), " values, need ",
                     cols * rank);
  const std::vector<float> q = powerSgdInitialQ(seed, tensorId, 0, cols, rank);
  std::copy(q.begin(), q.end(), out.data());
}

// Median seconds of PowerSGD's compression math on one rows x cols matrix (P = M Q, orthogonalize P,
// Q = M^T P) and of its decompression (M' = P Q^T), timed in C++: what scripts/bench-powersgd sets beside
// torch's same operations.
std::pair<double, double> powerSgdMathSeconds(const FloatsIn& matrix, uint64_t rows, uint64_t rank, int repeats) {
  GRADCOMP_CHECK_ARG(rows >= 1 && matrix.size() % rows == 0 && rank >= 1 && repeats >= 1 && repeats <= 1000,
                     "powersgd_math_seconds: a rows x cols matrix, rank >= 1, repeats in [1, 1000]");
  const uint64_t cols = matrix.size() / rows;
  std::vector<float> q = powerSgdInitialQ(1, 0, 0, cols, rank), p(rows * rank), out(rows * cols);
  std::vector<double> compress, decompress;
  nb::gil_scoped_release release;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::matmul(matrix.data(), rows, cols, q.data(), rank, p.data());
    cpu::orthogonalizeColumns(p.data(), rows, rank, 1e-8f);
    cpu::matmulTransposedA(matrix.data(), rows, cols, p.data(), rank, q.data());
    const auto t1 = std::chrono::steady_clock::now();
    cpu::matmulTransposedB(p.data(), rows, rank, q.data(), cols, out.data());
    const auto t2 = std::chrono::steady_clock::now();
    compress.push_back(std::chrono::duration<double>(t1 - t0).count());
    decompress.push_back(std::chrono::duration<double>(t2 - t1).count());
    cpu::orthogonalizeColumns(q.data(), cols, rank, 1e-8f);  // keeps Q bounded across repeats, not timed
  }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  return {median(compress), median(decompress)};
}

}  // namespace

void bindLowRank(nb::module_& m) {
  m.def("powersgd_math_seconds", &powerSgdMathSeconds, nb::arg("matrix").noconvert(), nb::arg("rows"), nb::arg("rank"),
        nb::arg("repeats"),
        "Median seconds of (P = M Q, orthogonalize P, Q = M^T P) and of P Q^T on one matrix, timed in C++.");
  m.def("powersgd_steps", &powerSgdSteps, nb::arg("grads").noconvert(), nb::arg("steps"), nb::arg("ranks"),
        nb::arg("rows"), nb::arg("lowrank"), nb::arg("error_feedback"), nb::arg("codec"), nb::arg("seed"),
        nb::arg("out").noconvert(),
        "Runs gradcomp's powersgd all-reduce for `steps` steps on `ranks` in-process ranks (grads: steps x ranks x "
        "rows*cols float32); writes each step's summed result into out (steps x rows*cols).");
  m.def("powersgd_initial_q", &powerSgdInitialQInto, nb::arg("seed"), nb::arg("tensor_id"), nb::arg("cols"),
        nb::arg("rank"), nb::arg("out").noconvert(),
        "The cols x rank matrix a tensor's PowerSGD Q starts from (before its first orthogonalization).");
}

}  // namespace gradcomp::python
