// Tests parameterised over the CPU kernels' vector paths (kernels/cpu/cpu_path.h): the test names.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kernels/cpu/cpu_path.h"

namespace gradcomp::cpu {

inline std::string cpuPathTestName(const ::testing::TestParamInfo<CpuPath>& p) { return cpuPathName(p.param); }

}  // namespace gradcomp::cpu
