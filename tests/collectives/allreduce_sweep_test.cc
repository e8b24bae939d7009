// Every algorithm x the codecs it supports x world sizes {1,2,3,4,5,7,8} x sizes {0,1,17,1000,2^20+5},
// ranks as threads. Lossless paths: exact integer data, bit for bit on every rank. Lossy paths: every
// rank holds the same bits, and the error against the exact sum is within 3x the codec's own error on
// one rank's vector (compounding over hops stays within that for these world sizes).
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "collectives/allreduce.h"
#include "compressors/registry.h"
#include "tests/collectives/collective_test_util.h"

namespace gradcomp {
namespace {

using testing::exactInput;
using testing::exactSum;
using testing::normalInput;

struct Case {
  const char* algorithm;
  const char* codec;
  const char* ef;
  bool lossless;
  const char* inter = "ring";
};

const Case kCases[] = {
    {"ring", "none", "none", true},
    {"ring", "none", "ef", true},
    {"tree", "none", "none", true},
    {"allgather", "none", "none", true},
    {"randomk", "randomk:ratio=1", "none", true},
    {"hierarchical", "none", "none", true, "ring"},
    {"hierarchical", "none", "none", true, "tree"},
    {"ring", "fp16", "none", false},
    {"ring", "bf16", "ef", false},
    {"ring", "fp8-e4m3", "ef", false},
    {"ring", "fp8-e5m2", "none", false},
    {"ring", "int8", "ef", false},
    {"ring", "qsgd:bits=8", "none", false},
    {"ring", "sign", "ef", false},
    {"ring", "mxfp8", "ef", false},
    {"ring", "mxfp6:elem=e3m2", "none", false},
    {"ring", "mxfp4", "ef", false},
    {"ring", "nvfp4", "ef", false},
    {"ring", "int4:rounding=stochastic", "none", false},
    {"tree", "int4", "ef", false},
    {"ring", "int4:rotate=hadamard", "ef", false},
    {"tree", "int8", "none", false},
    {"allgather", "topk:ratio=0.1", "ef", false},
    {"allgather", "threshold:ratio=0.1", "none", false},
    {"allgather", "sign", "ef", false},
    {"allgather", "onebit", "none", false},
    {"allgather", "terngrad", "none", false},
    {"randomk", "randomk:ratio=0.25", "ef", false},
    {"randomk", "randomk:ratio=0.25,values=fp16", "none", false},
    {"hierarchical", "int8", "ef", false, "ring"},
    {"hierarchical", "topk:ratio=0.1", "none", false, "allgather"},
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.algorithm << '/' << c.inter << ' ' << c.codec << " ef=" << c.ef;
}

const int kWorlds[] = {1, 2, 3, 4, 5, 7, 8};
const size_t kSizes[] = {0, 1, 17, 1000, (size_t{1} << 20) + 5};

std::string caseName(const ::testing::TestParamInfo<std::tuple<Case, int, size_t>>& info) {
  const auto& [c, p, n] = info.param;
  std::string s = std::string(c.algorithm) + "_" + (std::string(c.algorithm) == "hierarchical" ? c.inter + std::string("_") : "") +
                  c.codec + "_" + c.ef + "_p" + std::to_string(p) + "_n" + std::to_string(n);
  for (auto& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

class AllreduceSweep : public ::testing::TestWithParam<std::tuple<Case, int, size_t>> {};

// The codec's own relative error on one vector (what a single encode/decode costs).
double singleCodecError(const std::string& codecSpec, const std::vector<float>& x) {
  auto codec = makeCompressor(codecSpec);
  EncodeContext ctx;
  ctx.seed = 11;
  std::vector<std::byte> wire(codec->maxEncodedBytes(x.size(), ctx) + 16);
  auto* aligned = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(wire.data()) + 15) & ~uintptr_t(15));
  const auto span = std::span(aligned, codec->maxEncodedBytes(x.size(), ctx));
  const auto r = codec->encode(x, span, ctx);
  std::vector<float> y(x.size());
  codec->decode(span.first(r.wireBytes), y, DecodeMode::Overwrite);
  double e = 0, nrm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += double(y[i] - x[i]) * (y[i] - x[i]);
    nrm += double(x[i]) * x[i];
  }
  return nrm > 0 ? std::sqrt(e / nrm) : 0.0;
}

TEST_P(AllreduceSweep, SameBitsOnEveryRankAndCorrect) {
  const auto& [c, p, n] = GetParam();
  AllreduceConfig cfg;
  cfg.algorithm = c.algorithm;
  cfg.codec = c.codec;
  cfg.errorFeedback = c.ef;
  cfg.interAlgorithm = c.inter;
  cfg.seed = 5;
  cfg.chunkBytes = 64 * 1024;  // several pipeline chunks per segment at the large size
  CommunicatorOptions options;
  // hierarchical: 2 ranks per node where P is even (P > 2). With a codec there must be several nodes (on one
  // node the codec would never run, which is refused), so P = 2 and odd P get one rank per node.
  if (std::string(c.algorithm) == "hierarchical") {
    if (p % 2 == 0 && p > 2) options.ranksPerNode = 2;
    else if (p % 2 == 0) options.ranksPerNode = c.lossless ? 2 : 1;
    else if (!c.lossless) options.ranksPerNode = 1;
  }

  std::vector<std::vector<float>> results(static_cast<size_t>(p));
  std::vector<std::vector<float>> inputs(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) inputs[static_cast<size_t>(r)] = c.lossless ? exactInput(r, p, n) : normalInput(r, n);
  testing::runRanksOk(p, [&](Communicator& comm) {
    auto algo = AllreduceAlgorithm::make(cfg);
    auto x = inputs[static_cast<size_t>(comm.rank())];
    algo->run(x, comm, {3, 0, false});
    results[static_cast<size_t>(comm.rank())] = std::move(x);
  }, options);

  for (int r = 1; r < p; ++r)
    ASSERT_TRUE(n == 0 || std::memcmp(results[0].data(), results[static_cast<size_t>(r)].data(), n * sizeof(float)) == 0)
        << "rank " << r << " differs from rank 0";
  if (c.lossless) {
    const auto want = exactSum(p, n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(results[0][i], want[i]) << "element " << i;
    return;
  }
  std::vector<double> exact(n, 0.0);
  for (const auto& x : inputs)
    for (size_t i = 0; i < n; ++i) exact[i] += x[i];
  for (float v : results[0]) ASSERT_TRUE(std::isfinite(v));
  if (n < 1000) return;  // a few elements: a relative-error bound says little
  const double single = singleCodecError(c.codec, inputs[0]);
  const double err = testing::relativeError(results[0], exact);
  EXPECT_LE(err, 3.0 * single + 1e-6) << "codec alone: " << single;
}

INSTANTIATE_TEST_SUITE_P(Collectives, AllreduceSweep,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::ValuesIn(kWorlds),
                                            ::testing::ValuesIn(kSizes)),
                         caseName);

}  // namespace
}  // namespace gradcomp
