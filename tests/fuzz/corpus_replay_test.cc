// Replays the fuzzer's seed corpus (and any crash reproducers saved beside it) through the fuzz
// target in the normal test run; each seed, being a real encoder output, must also decode cleanly, to
// finite values. The regression files (forged wires that decoders once accepted although they decode to
// Inf/NaN) must each be refused.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "compressors/registry.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace gradcomp {
namespace {

std::vector<std::byte> readFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(bytes.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST(FuzzCorpus, EverySeedDecodesAndSurvivesTheTarget) {
  size_t seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(GRADCOMP_CORPUS_DIR)) {
    const auto bytes = readFile(entry.path());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    const WireHeader h = parseHeader(bytes);
    std::vector<float> out(h.numElements);
    EXPECT_NO_THROW(decodeAnyWire(bytes, out, DecodeMode::Overwrite)) << entry.path();
    for (float v : out) ASSERT_TRUE(std::isfinite(v)) << entry.path();
    // Mutations of the seed: every single-byte change and every truncation is handled.
    for (size_t i = 0; i < bytes.size(); ++i) {
      auto m = bytes;
      m[i] ^= std::byte{0x5a};
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(m.data()), m.size());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), i);
    }
    ++seeds;
  }
  EXPECT_GE(seeds, 80u) << "seed corpus missing: run make_corpus";
}

TEST(FuzzCorpus, EveryRegressionIsRefused) {
  size_t cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(GRADCOMP_REGRESSION_DIR)) {
    const auto bytes = readFile(entry.path());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());  // traps if accepted
    const WireHeader h = parseHeader(bytes);
    std::vector<float> out(h.numElements, 42.0f);
    EXPECT_THROW(decodeAnyWire(bytes, out, DecodeMode::Overwrite), DecodeError) << entry.path();
    // Never a partial decode: out untouched (refused before the first write), or, for the codecs that
    // check their payload a tile at a time as they decode (fp16, bf16, int8: compressors/compressor.h), all
    // zeros where a payload code or scale is what fails (a bad header field still fails before any write).
    const std::string codec = codecIdName(h.codec);
    const bool checksPerTile = codec == "fp16" || codec == "bf16" || codec == "int8";
    const float left = out.empty() ? 42.0f : out[0];
    ASSERT_TRUE(left == 42.0f || (checksPerTile && left == 0.0f)) << entry.path() << ": " << left;
    for (float v : out) ASSERT_EQ(std::bit_cast<uint32_t>(v), std::bit_cast<uint32_t>(left)) << entry.path();
    ++cases;
  }
  EXPECT_GE(cases, 6u) << "regression files missing: run make_corpus CORPUS REGRESSIONS";
}

}  // namespace
}  // namespace gradcomp
