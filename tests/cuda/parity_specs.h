// The codec configurations of the CUDA parity sweep (codec_parity_test.cc): every codec, with the
// configurations that change its kernels' paths. A plain header, so that the CPU suite checks on every
// machine that each row is a valid spec and every codec has one (tests/compressors/parity_sweep_rows_test.cc): the sweep
// itself runs only where a GPU answers, too late to find a malformed row.
#pragma once

#include <string>
#include <vector>

namespace gradcomp::testing {

inline const std::vector<std::string>& codecParitySpecs() {
  static const std::vector<std::string> v = {
      "none", "fp16", "fp16:prescale=0.125", "bf16", "fp8-e4m3", "fp8-e4m3:block=77", "fp8-e5m2", "int8",
      "int8:rounding=stochastic", "int8:rounding=stochastic,rounding_bits=8", "int8:block=100", "qsgd",
      "qsgd:bits=3,block=100", "qsgd:bits=8", "qsgd:bits=3,rounding_bits=8", "terngrad", "terngrad:block=37",
      "terngrad:rounding_bits=8", "sign", "sign:block=100", "onebit", "onebit:block=77", "topk",
      "topk:ratio=0.1,values=fp16", "topk:k=1", "threshold", "threshold:values=fp16,sample=64", "randomk",
      "randomk:values=fp16,unbiased=true", "mxfp8", "mxfp8:elem=e5m2", "mxfp8:block=77", "mxfp6", "mxfp6:elem=e3m2",
      "mxfp4", "mxfp4:block=24", "nvfp4", "int4", "int4:rounding=stochastic", "int4:rounding=stochastic,rounding_bits=8",
      "int4:block=100", "int4:rotate=hadamard", "int8:rotate=hadamard,rblock=64", "mxfp4:rotate=hadamard,rblock=1024",
      "nvfp4:rotate=hadamard", "sign:rotate=hadamard,rblock=32", "qsgd:bits=2,rotate=hadamard",
      "fp8-e4m3:rotate=hadamard,rblock=8192", "int4:rounding=stochastic,rounding_bits=8,rotate=hadamard"};
  return v;
}

}  // namespace gradcomp::testing
