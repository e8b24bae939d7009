// Tests parameterised over the CPU kernels' vector paths (kernels/cpu/cpu_path.h): the fixture and the test names.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kernels/cpu/cpu_path.h"

namespace gradcomp::cpu {

inline std::string cpuPathTestName(const ::testing::TestParamInfo<CpuPath>& p) { return cpuPathName(p.param); }

// A test run once per path: skipped where this CPU and build cannot run it, the process's path restored
// after it (each test sets the path it compares).
class CpuPathTest : public ::testing::TestWithParam<CpuPath> {
 protected:
  void SetUp() override {
    if (GetParam() > supportedCpuPath())
      GTEST_SKIP() << "this CPU and build cannot run the " << cpuPathName(GetParam()) << " path";
    saved_ = activeCpuPath();
  }
  void TearDown() override { setCpuPath(saved_); }
  CpuPath saved_ = CpuPath::Scalar;
};

}  // namespace gradcomp::cpu
