// The `powersgd` all-reduce (collectives/powersgd_allreduce.cc) against a serial transcription of the same
// math on all ranks' matrices (torch's powerSGD_hook steps: tests/python/test_powersgd.py compares with
// torch itself): the same bits on every rank, warm start and error feedback over steps, the tensors it
// leaves uncompressed, its bytes, and a checkpoint that resumes bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "collectives/allreduce.h"
#include "collectives/powersgd.h"
#include "kernels/cpu/low_rank.h"
#include "tests/collectives/collective_test_util.h"
#include "tests/compressors/codec_test_util.h"

namespace gradcomp {
namespace {

AllreduceConfig powerSgd(const std::string& lowRank, const std::string& ef = "ef", const std::string& codec = "none") {
  AllreduceConfig c;
  c.algorithm = "powersgd";
  c.codec = codec;
  c.errorFeedback = ef;
  c.lowRank = lowRank;
  c.seed = 9;
  return c;
}

// Runs `steps` all-reduces of one rows x cols tensor (rows 0: a vector of cols) on `ranks` in-process
// ranks; returns each step's result on every rank.
std::vector<std::vector<std::vector<float>>> runSteps(const AllreduceConfig& cfg, int ranks, uint64_t rows,
                                                      uint64_t cols, int steps, uint32_t firstStep = 0,
                                                      std::vector<std::string>* states = nullptr,
                                                      const std::vector<std::string>* load = nullptr) {
  std::vector<std::vector<std::vector<float>>> out(static_cast<size_t>(steps),
                                                   std::vector<std::vector<float>>(static_cast<size_t>(ranks)));
  if (states) states->assign(static_cast<size_t>(ranks), "");
  testing::runRanksOk(ranks, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(cfg);
    if (load) {
      std::istringstream in((*load)[static_cast<size_t>(comm.rank())]);
      algo->loadState(in);
    }
    for (int s = 0; s < steps; ++s) {
      const uint32_t step = firstStep + static_cast<uint32_t>(s);
      auto g = testing::normalVector(rows ? rows * cols : cols, 1000 * static_cast<uint32_t>(comm.rank()) + step);
      algo->run(g, comm, {7, step, false, rows});
      out[static_cast<size_t>(s)][static_cast<size_t>(comm.rank())] = std::move(g);
    }
    if (states) {
      std::ostringstream o;
      algo->saveState(o);
      (*states)[static_cast<size_t>(comm.rank())] = o.str();
    }
  });
  return out;
}

double relativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += double(a[i] - b[i]) * (a[i] - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d / std::max(n, 1e-300));
}

TEST(PowerSgd, MatchesTheSerialMathOverStepsWithWarmStartAndErrorFeedback) {
  const int ranks = 3, steps = 4;
  const uint64_t rows = 40, cols = 24, r = 2;
  const auto got = runSteps(powerSgd("rank=2,epsilon=1e-8"), ranks, rows, cols, steps);
  // The serial reference: the same steps on all ranks' matrices at once.
  std::vector<float> q = powerSgdInitialQ(9, 7, 0, cols, r);
  std::vector<std::vector<float>> e(ranks, std::vector<float>(rows * cols, 0.0f));
  for (int s = 0; s < steps; ++s) {
    std::vector<std::vector<float>> m(ranks);
    for (int k = 0; k < ranks; ++k) {
      m[k] = testing::normalVector(rows * cols, 1000 * static_cast<uint32_t>(k) + static_cast<uint32_t>(s));
      for (size_t i = 0; i < m[k].size(); ++i) m[k][i] += e[k][i];
    }
    cpu::orthogonalizeColumns(q.data(), cols, r, 1e-8f);
    std::vector<float> p(rows * r, 0.0f), pk(rows * r), qs(cols * r, 0.0f), qk(cols * r);
    for (int k = 0; k < ranks; ++k) {
      cpu::matmul(m[k].data(), rows, cols, q.data(), r, pk.data());
      for (size_t i = 0; i < p.size(); ++i) p[i] += pk[i];
    }
    cpu::orthogonalizeColumns(p.data(), rows, r, 1e-8f);
    for (int k = 0; k < ranks; ++k) {
      cpu::matmulTransposedA(m[k].data(), rows, cols, p.data(), r, qk.data());
      for (size_t i = 0; i < qs.size(); ++i) qs[i] += qk[i];
    }
    std::vector<float> want(rows * cols);
    cpu::matmulTransposedB(p.data(), rows, r, qs.data(), cols, want.data());
    for (int k = 0; k < ranks; ++k) {
      ASSERT_EQ(got[s][k], got[s][0]) << "step " << s << ": rank " << k << " holds other bits";
      for (size_t i = 0; i < want.size(); ++i) e[k][i] = m[k][i] - want[i] / ranks;
    }
    for (float& v : qs) v /= ranks;
    q = qs;
    // Summation order differs (ring vs serial): fp32 rounding only.
    EXPECT_LT(relativeDifference(got[s][0], want), 2e-5) << "step " << s;
  }
}

TEST(PowerSgd, LeavesVectorsSmallMatricesAndEarlyStepsExact) {
  const int ranks = 2;
  AllreduceConfig ring;
  ring.algorithm = "ring";
  struct Case {
    std::string lowRank;
    uint64_t rows, cols;
    uint32_t step;
  };
  for (const Case& k : {Case{"rank=1", 0, 100, 0},             // a vector
                        Case{"rank=4", 1, 100, 0},             // one row
                        Case{"rank=4,min_compression=2", 8, 8, 0},  // 8 x 8 at rank 4 would not shrink 2x
                        // (4 + 4) x 1 x 2 = 16 = 4 x 4: torch's _should_compress asks for strictly less
                        Case{"rank=1,min_compression=2", 4, 4, 0},
                        Case{"rank=1,start_iter=5", 30, 30, 4}}) {   // before start_iter
    SCOPED_TRACE(k.lowRank);
    const uint64_t n = (k.rows ? k.rows : 1) * k.cols;
    const auto got = runSteps(powerSgd(k.lowRank), ranks, k.rows, k.cols, 1, k.step);
    std::vector<float> want(n, 0.0f);
    for (int r = 0; r < ranks; ++r) {
      const auto g = testing::normalVector(n, 1000 * static_cast<uint32_t>(r) + k.step);
      for (size_t i = 0; i < n; ++i) want[i] += g[i];
    }
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(got[0][0][i], want[i], 1e-6f * (1 + std::fabs(want[i]))) << i;
  }
}

// Just past that boundary ((4 + 4) x 1 x 1.99 < 16) the 4 x 4 matrix is compressed: its rank-1
// approximation of the sum is not the exact sum.
TEST(PowerSgd, CompressesAMatrixStrictlyPastMinCompression) {
  const int ranks = 2;
  const auto got = runSteps(powerSgd("rank=1,min_compression=1.99"), ranks, 4, 4, 1, 0);
  std::vector<float> want(16, 0.0f);
  for (int r = 0; r < ranks; ++r) {
    const auto g = testing::normalVector(16, 1000 * static_cast<uint32_t>(r));
    for (size_t i = 0; i < 16; ++i) want[i] += g[i];
  }
  double diff = 0, norm = 0;
  for (size_t i = 0; i < 16; ++i) {
    diff += (got[0][0][i] - want[i]) * double(got[0][0][i] - want[i]);
    norm += double(want[i]) * want[i];
  }
  EXPECT_GT(diff, 1e-3 * norm);
}

TEST(PowerSgd, SendsTwoRingsOfTheFactorsAndFp16HalvesThem) {
  const int ranks = 4;
  const uint64_t rows = 1024, cols = 512, r = 2;  // large enough that fp16's 48-byte headers do not dominate
  uint64_t bytes[2] = {0, 0};
  int slot = 0;
  for (const char* codec : {"none", "fp16"}) {
    std::vector<uint64_t> sent(ranks);
    std::vector<std::vector<float>> results(ranks);
    testing::runRanksOk(ranks, [&](Communicator& comm) {
      auto algo = AllreduceAlgorithm::make(powerSgd("rank=2", "ef", codec));
      auto g = testing::normalVector(rows * cols, static_cast<uint32_t>(comm.rank()));
      const AllreduceReport rep = algo->run(g, comm, {3, 0, false, rows});
      sent[static_cast<size_t>(comm.rank())] = rep.bytesSent;
      results[static_cast<size_t>(comm.rank())] = g;
    });
    bytes[slot++] = sent[0];
    for (int k = 1; k < ranks; ++k) EXPECT_EQ(results[k], results[0]);
  }
  // fp32: the ring moves 2 (W-1)/W of (rows + cols) r floats (each factor split in W segments).
  const double expect = 2.0 * (ranks - 1) / ranks * 4.0 * (rows + cols) * r;
  EXPECT_NEAR(static_cast<double>(bytes[0]), expect, 0.02 * expect);
  EXPECT_LT(bytes[1], bytes[0] * 0.75);  // fp16 payloads (with their headers)
  EXPECT_LT(bytes[0], rows * cols * 4 / 5);  // far below the uncompressed 2 (W-1)/W x 4 x rows x cols
}

TEST(PowerSgd, CheckpointResumesBitwise) {
  const auto cfg = powerSgd("rank=2");
  std::vector<std::string> after2;
  const auto straight = runSteps(cfg, 2, 20, 30, 4);
  runSteps(cfg, 2, 20, 30, 2, 0, &after2);
  const auto resumed = runSteps(cfg, 2, 20, 30, 2, 2, nullptr, &after2);
  for (int s = 0; s < 2; ++s) EXPECT_EQ(resumed[s][0], straight[s + 2][0]) << "step " << s + 2;
  // A truncated state, or another algorithm's, is refused by name.
  auto algo = AllreduceAlgorithm::make(cfg);
  std::istringstream truncated(after2[0].substr(0, after2[0].size() - 5));
  try {
    algo->loadState(truncated);
    ADD_FAILURE() << "a truncated state was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("powersgd state: truncated"), std::string::npos) << e.what();
  }
  AllreduceConfig ring;
  ring.algorithm = "ring";
  ring.codec = "int8";
  ring.errorFeedback = "ef";
  std::ostringstream ringState;
  AllreduceAlgorithm::make(ring)->saveState(ringState);
  std::istringstream foreign(ringState.str());
  EXPECT_THROW(algo->loadState(foreign), InvalidArgument);
}

TEST(PowerSgdBatches, GroupMatricesOfOneShapeInTheOrderTheyFirstAppear) {
  const std::vector<MatrixShape> shapes = {{24, 16, 2}, {16, 24, 2}, {24, 16, 2}, {8, 8, 1},
                                           {16, 24, 2}, {24, 16, 1}, {24, 16, 2}};
  using Batches = std::vector<std::vector<size_t>>;
  // {24, 16, 1} is not {24, 16, 2}: the rank is part of the shape (P and Q differ).
  EXPECT_EQ(powerSgdBatches(shapes, true), (Batches{{0, 2, 6}, {1, 4}, {3}, {5}}));
  EXPECT_EQ(powerSgdBatches(shapes, false), (Batches{{0}, {1}, {2}, {3}, {4}, {5}, {6}}));
  EXPECT_EQ(powerSgdBatches({}, true), Batches{});
}

// A bucket of several matrices, some of one shape, with tensors left exact between them: batching the
// math changes no bit of the results or of the saved state (P and Q keep their places in the sums), at
// every rank count, through fp16 too, over steps with warm start and error feedback. A batch that
// paired a matrix with another's Q, residual or output would show here.
TEST(PowerSgd, BatchingSameShapeMatricesChangesNoBit) {
  const uint64_t a = 24 * 16, b = 16 * 24;
  // 24x16, a 16-vector, 24x16, 16x24, 24x16, a 4x4 (left exact), 16x24.
  std::vector<MatrixSegment> layout;
  uint64_t at = 0;
  for (const auto& [count, rows] : std::vector<std::pair<uint64_t, uint64_t>>{
           {a, 24}, {16, 0}, {a, 24}, {b, 16}, {a, 24}, {16, 4}, {b, 16}}) {
    layout.push_back({at, count, rows});
    at += count;
  }
  const uint64_t n = at;
  const int steps = 3;
  for (const char* codec : {"none", "fp16"})
    for (int ranks : {1, 2, 3}) {
      SCOPED_TRACE(::testing::Message() << codec << ", " << ranks << " ranks");
      std::vector<std::vector<float>> results[2];
      std::vector<std::string> states[2];
      for (int batched = 0; batched < 2; ++batched) {
        results[batched].assign(static_cast<size_t>(ranks * steps), {});
        states[batched].assign(static_cast<size_t>(ranks), "");
        const auto cfg = powerSgd(std::string("rank=2,batch=") + (batched ? "true" : "false"), "ef", codec);
        testing::runRanksOk(ranks, [&](Communicator& comm) {
          auto algo = AllreduceAlgorithm::make(cfg);
          for (int s = 0; s < steps; ++s) {
            auto g = testing::normalVector(n, 100 * static_cast<uint32_t>(comm.rank()) + static_cast<uint32_t>(s));
            algo->run(g, comm, {5, static_cast<uint32_t>(s), false, 0, layout});
            results[batched][static_cast<size_t>(comm.rank() * steps + s)] = std::move(g);
          }
          std::ostringstream o;
          algo->saveState(o);
          states[batched][static_cast<size_t>(comm.rank())] = o.str();
        });
      }
      for (size_t i = 0; i < results[0].size(); ++i) {
        ASSERT_EQ(results[0][i].size(), n);
        EXPECT_EQ(0, std::memcmp(results[0][i].data(), results[1][i].data(), n * sizeof(float)))
            << "rank " << i / steps << ", step " << i % steps;
      }
      for (size_t r = 0; r < states[0].size(); ++r)
        EXPECT_TRUE(states[0][r] == states[1][r]) << "rank " << r << "'s saved state differs";
      // And the matrices were compressed: the 24x16 at offset 0 is not the exact sum.
      std::vector<float> exact(n, 0.0f);
      for (int r = 0; r < ranks; ++r) {
        const auto g = testing::normalVector(n, 100 * static_cast<uint32_t>(r));
        for (size_t i = 0; i < n; ++i) exact[i] += g[i];
      }
      std::vector<float> first(results[1][0].begin(), results[1][0].begin() + a), want(exact.begin(), exact.begin() + a);
      EXPECT_GT(relativeDifference(first, want), 0.1);
    }
  // The option is named in the algorithm's description, so two runs that differ in it say so; at its
  // default it is left out (the description, which ranks compare, is what it was before the option).
  EXPECT_NE(AllreduceAlgorithm::make(powerSgd("rank=2,batch=1"))->describe().find("batch=true"), std::string::npos);
  const std::string plain = AllreduceAlgorithm::make(powerSgd("rank=2,batch=false"))->describe();
  EXPECT_EQ(plain.find("batch"), std::string::npos) << plain;
  EXPECT_EQ(plain, AllreduceAlgorithm::make(powerSgd("rank=2"))->describe());
}

TEST(PowerSgd, RefusesWhatItCannotDo) {
  auto refused = [](const AllreduceConfig& c, const std::string& text) {
    try {
      AllreduceAlgorithm::make(c);
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  refused(powerSgd("rank=2", "ef21"), "error feedback 'none' or 'ef'");
  refused(powerSgd("rank=2", "ef", "int8"), "fp32, fp16 or bf16");
  refused(powerSgd("rank=0"), "rank");
  refused(powerSgd("rank=2,bogus=1"), "bogus");
  refused(powerSgd("rank=2,batch=maybe"), "batch");
}


// A CUDA buffer is summed on the device (collectives/low_rank_math.h). Where no GPU answers (CI), every
// rank is refused with BackendUnavailable naming the algorithm and the missing device, before any data
// moves, and the same algorithm objects then run host buffers as before; where a GPU answers, the
// device result tracks the host math (tests/cuda/collectives_cuda_test.cc states the bound).
TEST(PowerSgd, ACudaBufferWithoutAGpuIsRefusedClearly) {
  const uint64_t rows = 16, cols = 12;
  const auto reference = runSteps(powerSgd("rank=2"), 2, rows, cols, 1);
  std::vector<std::string> errors(2);
  testing::runRanksOk(2, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(powerSgd("rank=2"));
    auto g = testing::normalVector(rows * cols, 1000 * static_cast<uint32_t>(comm.rank()));
    const auto original = g;
    ExecContext gpu;
    gpu.device = Device::Cuda;
    try {
      // A host pointer stands in for the device buffer: it must not be touched when the device is missing.
      algo->run(g, comm, {7, 0, false, rows}, gpu);
      errors[static_cast<size_t>(comm.rank())] = "ran";
      return;
    } catch (const BackendUnavailable& e) {
      errors[static_cast<size_t>(comm.rank())] = e.what();
    }
    EXPECT_EQ(g, original) << "the refused call changed the buffer";
    algo->run(g, comm, {7, 0, false, rows});
    EXPECT_EQ(g, reference[0][static_cast<size_t>(comm.rank())]) << "the host run after the refusal";
  });
  for (const std::string& e : errors) {
    if (e == "ran") GTEST_SKIP() << "a GPU answered here: the CUDA suite checks the device path";
    EXPECT_NE(e.find("powersgd"), std::string::npos) << e;
    EXPECT_TRUE(e.find("no CUDA device") != std::string::npos || e.find("has no CUDA") != std::string::npos) << e;
  }
}

}  // namespace
}  // namespace gradcomp
