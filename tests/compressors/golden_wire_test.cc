// Golden hashes (docs/reliability.md row 31): for a fixed input, the SHA-256 of every codec
// configuration's wire bytes, of its decoded values, and of the residual its fused error-feedback encode
// leaves, committed here. The scalar build (GRADCOMP_NATIVE=OFF, plain x86-64), the AVX2 build and an
// AVX-512 machine's native build must all give exactly these: the vector paths are pinned to the scalar
// reference on every machine, not only where a test happens to compare them. The input is generated
// from integers alone (splitmix64), so no library's random distribution enters it.
//
// To regenerate after an intended change of the bytes: GRADCOMP_PRINT_GOLDEN=1 ./gradcomp_unit_tests
// --gtest_filter='Golden*' prints the table; check that the change is intended, on the scalar build too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "compressors/registry.h"
#include "core/sha256.h"
#include "kernels/cpu/compiled_isa.h"
#include "kernels/cpu/cpu_path.h"
#include "tests/kernels/cpu_path_params.h"
#include "tests/compressors/codec_test_util.h"

namespace gradcomp {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// 3001 values in [-1, 1) with structure that exercises the edge paths: every 97th an outlier (x 1000),
// every 13th an exact zero, every 101st a subnormal, and a run of ties for the sparse selectors.
std::vector<float> goldenInput(uint64_t seed) {
  std::vector<float> x(3001);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint64_t r = splitmix64(seed * 0x100000001B3ull + i);
    float v = static_cast<float>(static_cast<double>(r >> 40) / 16777216.0 * 2.0 - 1.0);  // exact in fp32
    if (i % 97 == 5) v *= 1000.0f;
    if (i % 13 == 7) v = 0.0f;
    if (i % 101 == 11) v = (r & 1) ? 1e-40f : -1e-40f;
    if (i >= 2000 && i < 2040) v = 0.75f;  // ties
    x[i] = v;
  }
  return x;
}

// The same input pushed to the ends of the fp32 range: a third of it in blocks below 2^-100 (qsgd and
// terngrad take their normalized ratio there), a third scaled towards FLT_MAX (scales raised, norms capped).
std::vector<float> goldenEdgeInput() {
  std::vector<float> x = goldenInput(3);
  for (size_t i = 0; i < x.size(); ++i) {
    if (i < 1000) x[i] *= 1e-33f;
    else if (i < 2000) x[i] = std::max(-FLT_MAX, std::min(FLT_MAX, x[i] * 3e37f));
  }
  return x;
}

std::string hashOf(std::span<const std::byte> bytes) { return sha256Hex(bytes).substr(0, 16); }
std::string hashOf(const std::vector<float>& v) { return hashOf(std::as_bytes(std::span(v))); }

struct Golden {
  const char* wire;
  const char* decoded;
  const char* residual;
};

// spec (" @edges": the edge input) -> first 16 hex digits of SHA-256 of (wire bytes, decoded fp32 values, fused ef residual).
const std::map<std::string, Golden>& goldenTable() {
  static const std::map<std::string, Golden> table = {
#include "tests/compressors/golden_wire_hashes.inc"
  };
  return table;
}

// Every vector path this CPU runs (AVX-512, AVX2, scalar: kernels/cpu/cpu_path.h) must give the
// committed bytes: the hashes pin each path to the others on every machine that has it.
class GoldenWire : public ::testing::TestWithParam<cpu::CpuPath> {
 protected:
  void SetUp() override {
    if (GetParam() > cpu::supportedCpuPath())
      GTEST_SKIP() << "this CPU and build cannot run the " << cpu::cpuPathName(GetParam()) << " path";
    saved_ = cpu::activeCpuPath();
    cpu::setCpuPath(GetParam());
  }
  void TearDown() override { cpu::setCpuPath(saved_); }
  cpu::CpuPath saved_ = cpu::CpuPath::Scalar;
};

TEST_P(GoldenWire, EveryCodecConfigurationGivesTheCommittedBytes) {
  const bool print = std::getenv("GRADCOMP_PRINT_GOLDEN") != nullptr && GetParam() == cpu::CpuPath::Scalar;
  const std::vector<float> input = goldenInput(1), e = [] {
    std::vector<float> r = goldenInput(2);
    for (float& v : r) v *= 0.01f;
    return r;
  }();
  const std::vector<float> edges = goldenEdgeInput();
  const EncodeContext ctx{42, 3, 17, 5, 0};
  size_t checked = 0;
  for (const std::string& spec : testing::kCodecConfigurations)
  for (const bool atEdges : {false, true}) {
    const std::string key = atEdges ? spec + " @edges" : spec;
    SCOPED_TRACE(key);
    const auto codec = makeCompressor(spec);
    const std::vector<float>& x = atEdges ? edges : input;
    const auto wire = testing::encodeToVector(*codec, x, ctx);
    const auto decoded = testing::decodeToVector(*codec, wire, x.size());
    const size_t cap = codec->maxEncodedBytes(x.size(), ctx);
    testing::WireBuffer buf(cap);
    std::vector<float> residual(x.size());
    codec->encodeWithResidual(x, e, residual, buf.span(cap), ctx);
    const std::string w = hashOf(wire), d = hashOf(decoded), r = hashOf(residual);
    if (print) std::printf("    {\"%s\", {\"%s\", \"%s\", \"%s\"}},\n", key.c_str(), w.c_str(), d.c_str(), r.c_str());
    const auto it = goldenTable().find(key);
    if (it == goldenTable().end()) {
      ADD_FAILURE() << "no golden hashes for '" << key << "' (regenerate with GRADCOMP_PRINT_GOLDEN=1)";
      continue;
    }
    EXPECT_EQ(w, it->second.wire) << "wire bytes changed";
    EXPECT_EQ(d, it->second.decoded) << "decoded values changed";
    EXPECT_EQ(r, it->second.residual) << "fused error-feedback residual changed";
    ++checked;
  }
  EXPECT_EQ(checked, goldenTable().size()) << "the table has rows for configurations no longer tested";
  std::printf("golden wire hashes: %zu configurations checked on the %s path (this build compiles %s%s)\n", checked,
              cpu::cpuPathName(cpu::activeCpuPath()), cpu::compiledVectorPaths(),
              cpu::compiledWithAvx512() ? ", with AVX-512 enabled" : "");
}

// The golden input fits one tile; a long tensor spans many, on one or two threads, across nvfp4's kept
// block maxima (one word per block, found by the amax pass in 2^16-value chunks and read by each 8192-value
// tile at its own offset) and the rotation's chunks (checked by the maximum the rotation read). Its bytes
// must be the scalar path's on every path and thread count.
TEST_P(GoldenWire, LongTensorsGiveTheScalarPathsBytesOnEveryTileAndThreadCount) {
  const size_t n = (size_t{1} << 19) + 37;  // two threads' worth, a partial last block
  std::vector<float> x = goldenInput(3);
  while (x.size() < n) {
    const std::vector<float> more = goldenInput(static_cast<uint64_t>(x.size()));
    x.insert(x.end(), more.begin(), more.end());
  }
  x.resize(n);
  for (size_t i = 70000; i < 70000 + 4096; ++i) x[i] = 0.0f;  // zero blocks past the first chunk
  x[200001] = 3e30f;                                           // one block's scale far above the rest
  const EncodeContext ctx{42, 3, 17, 5, 0};
  ExecContext two;
  two.cpuThreads = 2;
  for (const char* spec : {"nvfp4", "int4:rotate=hadamard", "mxfp4"}) {
    SCOPED_TRACE(spec);
    const auto codec = makeCompressor(spec);
    const cpu::CpuPath path = cpu::activeCpuPath();
    cpu::setCpuPath(cpu::CpuPath::Scalar);
    const auto want = testing::encodeToVector(*codec, x, ctx);
    cpu::setCpuPath(path);
    EXPECT_EQ(testing::encodeToVector(*codec, x, ctx), want) << "one thread";
    const size_t cap = codec->maxEncodedBytes(n, ctx);
    testing::WireBuffer buf(cap);
    const EncodeResult r = codec->encode(x, buf.span(cap), ctx, two);
    const auto got = buf.span(r.wireBytes);
    EXPECT_EQ(std::vector<std::byte>(got.begin(), got.end()), want) << "two threads";
  }
}

INSTANTIATE_TEST_SUITE_P(CpuPaths, GoldenWire,
                         ::testing::Values(cpu::CpuPath::Avx512, cpu::CpuPath::Avx2, cpu::CpuPath::Scalar), cpu::cpuPathTestName);

}  // namespace
}  // namespace gradcomp
