// The compressed ring with a rotate=hadamard codec sums in the rotated domain (ring_allreduce.cc): each
// rank rotates its tensor once, the hops carry the codec less its rotation, the sum is rotated back once;
// error feedback's residual is back in the original domain after every call.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "collectives/allreduce.h"
#include "compressors/registry.h"
#include "core/error.h"
#include "kernels/cpu/hadamard_rotation.h"
#include "tests/collectives/collective_test_util.h"

namespace gradcomp {
namespace {

using testing::normalInput;

constexpr uint64_t kSeed = 5;
constexpr uint32_t kTensor = 3, kStep = 2;

AllreduceConfig ringOf(const std::string& codec, const std::string& ef = "none") {
  AllreduceConfig c = testing::allreduceConfig("ring", codec, ef);
  c.seed = kSeed;
  c.chunkBytes = 4096;  // several chunks per segment
  return c;
}

// Every rank's result of one all-reduce of inputs[rank] (step kStep, tensor kTensor).
std::vector<std::vector<float>> ringResults(const AllreduceConfig& cfg, const std::vector<std::vector<float>>& inputs) {
  const int p = static_cast<int>(inputs.size());
  std::vector<std::vector<float>> out(inputs.size());
  testing::runRanksOk(p, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(cfg);
    auto x = inputs[static_cast<size_t>(comm.rank())];
    AllreduceCall call;
    call.tensorId = kTensor;
    call.step = kStep;
    algo->run(x, comm, call);
    out[static_cast<size_t>(comm.rank())] = std::move(x);
  });
  return out;
}

class RotatedRing : public ::testing::TestWithParam<std::tuple<int, size_t>> {};

// The result is, bit for bit, the unrotated codec's ring on every rank's rotated tensor (prescale 1 / b),
// rotated back once (postscale b): one transform pair per all-reduce, D keyed by (seed, step, tensor).
TEST_P(RotatedRing, SumsTheRotatedTensorsAndRotatesBackOnce) {
  const auto [p, n] = GetParam();
  constexpr uint64_t kBlock = 64;
  std::vector<std::vector<float>> inputs, rotated;
  const scalar::RotationKey key{kSeed, kStep, kTensor};
  for (int r = 0; r < p; ++r) {
    inputs.push_back(normalInput(r, n));
    rotated.push_back(inputs.back());
    cpu::rotateForward(rotated.back().data(), rotated.back().data(), n, kBlock, key, 1.0f / kBlock);
  }
  const auto got = ringResults(ringOf("int8:rotate=hadamard,rblock=64"), inputs);
  auto want = ringResults(ringOf("int8"), rotated)[0];
  cpu::rotateInverse(want.data(), want.data(), n, kBlock, key, static_cast<float>(kBlock));
  for (int r = 0; r < p; ++r)
    ASSERT_EQ(std::memcmp(got[static_cast<size_t>(r)].data(), want.data(), n * sizeof(float)), 0) << "rank " << r;
  // And not the plain codec's ring on the unrotated tensors: the rotation happened.
  const auto plain = ringResults(ringOf("int8"), inputs)[0];
  EXPECT_NE(std::memcmp(got[0].data(), plain.data(), n * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(WorldsAndSizes, RotatedRing,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5),
                                            // whole blocks, and a tail that splits into smaller blocks
                                            ::testing::Values(size_t{4096}, size_t{3000 + 37})));

// With `ef`, over several steps (D changes with the step): the ranks' gradients plus the residuals they
// carried in equal the all-reduced sum plus the residuals they carry out, in the original domain, to
// fp32 rounding. A residual left in the rotated domain would miss this by the codec's error (int4: about
// a tenth of the values).
TEST(RotatedRingErrorFeedback, ResidualsStayInTheOriginalDomain) {
  constexpr int kRanks = 3;
  constexpr size_t kN = 5000;
  std::vector<std::vector<double>> lhs(4), rhs(4);
  std::vector<double> scale(4, 0.0), largestResidual(4, 0.0);
  std::mutex m;
  testing::runRanksOk(kRanks, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(ringOf("int4:rotate=hadamard", "ef"));
    for (uint32_t step = 0; step < 4; ++step) {
      auto x = normalInput(comm.rank(), kN, 100 + step);
      std::vector<double> before(x.begin(), x.end());
      const auto carried = algo->errorFeedback().stateBuffer(kTensor, 0);
      if (step > 0) {
        EXPECT_EQ(carried.size(), kN);
      }
      for (size_t i = 0; i < carried.size(); ++i) before[i] += carried[i];
      AllreduceCall call;
      call.tensorId = kTensor;
      call.step = step;
      algo->run(x, comm, call);
      const auto after = algo->errorFeedback().stateBuffer(kTensor, 0);
      ASSERT_EQ(after.size(), kN);
      const std::lock_guard<std::mutex> lock(m);
      auto& l = lhs[step];
      auto& rr = rhs[step];
      if (l.empty()) {
        l.assign(kN, 0.0);
        rr.assign(x.begin(), x.end());  // the sum, the same on every rank
      }
      for (size_t i = 0; i < kN; ++i) {
        l[i] += before[i];
        rr[i] += after[i];
        scale[step] = std::max(scale[step], std::abs(before[i]));
        largestResidual[step] = std::max(largestResidual[step], std::abs(static_cast<double>(after[i])));
      }
    }
  });
  for (size_t step = 0; step < 4; ++step) {
    double worst = 0;
    for (size_t i = 0; i < kN; ++i) worst = std::max(worst, std::abs(lhs[step][i] - rhs[step][i]));
    EXPECT_LT(worst, 1e-5 * kRanks * scale[step]) << "step " << step;
    EXPECT_GT(largestResidual[step], 0.01 * scale[step]) << "step " << step << ": int4 leaves a residual";
  }
}

// The rotated domain ends with the call: afterwards the payload codec sizes (and so encodes) with the
// rotated codec again, and a second all-reduce on the same object gives the first one's bits.
TEST(RotatedRingErrorFeedback, TheDomainEndsWithTheCall) {
  const auto inputs = std::vector<std::vector<float>>{normalInput(0, 2000), normalInput(1, 2000)};
  std::vector<std::vector<float>> first(2), second(2);
  testing::runRanksOk(2, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(ringOf("mxfp4:rotate=hadamard"));
    const size_t r = static_cast<size_t>(comm.rank());
    first[r] = inputs[r];
    second[r] = inputs[r];
    AllreduceCall call;
    call.tensorId = kTensor;
    call.step = kStep;
    algo->run(first[r], comm, call);
    const EncodeContext ctx{};
    const auto rotated = makeCompressor("mxfp4:rotate=hadamard"), plain = makeCompressor("mxfp4");
    EXPECT_EQ(algo->payload().maxBytes(2000, ctx), rotated->maxEncodedBytes(2000, ctx));
    EXPECT_NE(rotated->maxEncodedBytes(2000, ctx), plain->maxEncodedBytes(2000, ctx));  // the rotation section
    {
      const PayloadCodec::RotatedDomain inside(algo->payload());
      EXPECT_EQ(algo->payload().maxBytes(2000, ctx), plain->maxEncodedBytes(2000, ctx));
    }
    algo->run(second[r], comm, call);
  });
  EXPECT_EQ(std::memcmp(first[0].data(), second[0].data(), 2000 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(first[0].data(), first[1].data(), 2000 * sizeof(float)), 0);
}

// ef's `limit` bounds the residual in the original domain: a rotated residual is about 1/b of it here
// (prescale 1/b), so the check at each hop would pass one the limit must reset. int4 on N(0, 1) leaves
// residuals up to about a quarter; with limit=0.05 they are reset after the call, with a warning.
TEST(RotatedRingErrorFeedback, TheLimitHoldsInTheOriginalDomain) {
  std::vector<uint64_t> resets(2);
  std::vector<float> largest(2, -1.0f);
  std::vector<std::string> warnings(2);
  testing::runRanksOk(2, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(ringOf("int4:rotate=hadamard", "ef:limit=0.05"));
    const size_t r = static_cast<size_t>(comm.rank());
    algo->errorFeedback().setWarningSink([&, r](const std::string& w) { warnings[r] = w; });
    auto x = normalInput(comm.rank(), 4096);
    AllreduceCall call;
    call.tensorId = kTensor;
    algo->run(x, comm, call);
    resets[r] = algo->errorFeedback().resets();
    largest[r] = 0.0f;
    for (float e : algo->errorFeedback().stateBuffer(kTensor, 0)) largest[r] = std::max(largest[r], std::abs(e));
  });
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_GE(resets[r], 1u) << "rank " << r;
    EXPECT_LE(largest[r], 0.05f) << "rank " << r;
    EXPECT_NE(warnings[r].find("state exceeded |x| <= 0.05"), std::string::npos) << warnings[r];
  }
}

// A hop whose payload is corrupted fails the all-reduce on the rank that decodes it; that rank's codec
// leaves the rotated domain and its residual (the hops encoded so far) is back in the original domain,
// where int4's error on N(0, 1) values is tenths, not the thousandths of the rotated domain's 1 / b scale.
TEST(RotatedRingErrorFeedback, AFailedAllReduceLeavesTheDomainAndRotatesTheResidualBack) {
  std::vector<size_t> maxBytes(2, 0);
  std::vector<float> largest(2, -1.0f);
  const auto errors = runInProcess(2, [&](Communicator& inner) {
    testing::FaultyCommunicator comm(inner, [&](std::vector<std::byte>& m, int, Tag tag) {
      if (inner.rank() == 1 && (tag & 0xFF) != 0 && m.size() >= 64) m[20] ^= std::byte{0x40};  // a hop's header
    });
    auto algo = AllreduceAlgorithm::make(ringOf("int4:rotate=hadamard", "ef"));
    auto x = normalInput(comm.rank(), 8192);
    AllreduceCall call;
    call.tensorId = kTensor;
    const size_t r = static_cast<size_t>(comm.rank());
    try {
      algo->run(x, comm, call);
    } catch (...) {
      maxBytes[r] = algo->payload().maxBytes(8192, EncodeContext{});
      for (float e : algo->errorFeedback().stateBuffer(kTensor, 0)) largest[r] = std::max(largest[r], std::abs(e));
      throw;
    }
  }, testing::withTimeout(2));
  ASSERT_TRUE(errors[0] && testing::isA<DecodeError>(errors[0])) << testing::messageOf(errors[0]);
  EXPECT_EQ(maxBytes[0], makeCompressor("int4:rotate=hadamard")->maxEncodedBytes(8192, EncodeContext{}));
  EXPECT_GT(largest[0], 0.05f);  // rank 0 encoded its first hop's segment before the bad payload came
}

// The cost model sizes the hops as they go: the codec without its rotation section.
TEST(RotatedRingErrorFeedback, TheModelSizesTheHopsWithoutTheRotationSection) {
  const LinkModel links = LinkModel::parse("inter=1GB/0us");
  const auto rotated = AllreduceAlgorithm::make(ringOf("int4:rotate=hadamard")),
             plain = AllreduceAlgorithm::make(ringOf("int4"));
  EXPECT_EQ(rotated->predictSeconds(1 << 20, 4, 1, links), plain->predictSeconds(1 << 20, 4, 1, links));
}

TEST(RotatedRingErrorFeedback, OnlyARotatedCodecHasARotatedDomain) {
  PayloadCodec plain("int8", "ef");
  EXPECT_EQ(plain.rotationBlock(), 0u);
  try {
    const PayloadCodec::RotatedDomain domain(plain);
    ADD_FAILURE() << "int8 has no rotation, but a rotated domain was opened";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'int8' does not rotate"), std::string::npos) << e.what();
  }
  EXPECT_EQ(PayloadCodec("sign:rotate=hadamard,rblock=32", "ef").rotationBlock(), 32u);
  EXPECT_THROW(ErrorFeedback::make("ef21")->sliceResidual(0), InvalidArgument);  // no per-element residual
}

}  // namespace
}  // namespace gradcomp
