// The CUDA parity sweep's rows (tests/cuda/parity_specs.h), checked where no GPU is: the sweep itself
// runs only where a device answers, too late to find a malformed row (four were once written with ':'
// between parameters, which the spec parser refuses).
#include <gtest/gtest.h>

#include <string>

#include "compressors/registry.h"
#include "tests/cuda/parity_specs.h"

namespace gradcomp {
namespace {

TEST(CodecParitySweep, EveryRowIsAValidSpecAndEveryCodecHasOne) {
  for (const auto& spec : testing::codecParitySpecs()) EXPECT_NO_THROW(makeCompressor(spec)) << spec;
  for (const auto& name : codecNames()) {
    bool found = false;
    for (const auto& s : testing::codecParitySpecs()) found = found || s.rfind(name, 0) == 0;
    EXPECT_TRUE(found) << name << " has no CUDA parity case";
  }
}

}  // namespace
}  // namespace gradcomp
