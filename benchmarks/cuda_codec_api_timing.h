// Times whole codec calls on CUDA buffers (Compressor::encode / encodeWithResidual / decode with a
// CUDA ExecContext): the kernels plus the per-call work around them (header copy, counters, the
// wait for the stream). Kept apart from cuda_kernel_bench.cu because the codec headers are C++20 and
// nvcc compiles .cu files as C++17 here.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace gradcomp::bench {

struct ApiTiming {
  std::string name;
  double ms;
};

// x: n device floats. Median of `reps` calls each.
std::vector<ApiTiming> timeCodecApi(const float* x, size_t n, int reps);

}  // namespace gradcomp::bench
