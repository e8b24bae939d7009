// `gradcomp encode` / `gradcomp decode`: one codec call on raw files, so other front ends (the Python
// package, a user's script) can be checked byte for byte against the C++ library:
//   encode: raw little-endian float32 in -> the wire buffer out (optionally with an error-feedback
//           residual in and out, through encodeWithResidual);
//   decode: any wire buffer in -> raw float32 out (the codec its header names).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace gradcomp {

struct EncodeCommandOptions {
  std::string codec;
  std::string input, output;
  std::string residualIn, residualOut;  // both or neither
  uint64_t seed = 0;
  uint32_t rank = 0, step = 0, tensorId = 0;
};

struct DecodeCommandOptions {
  std::string input, output;
};

void runEncodeCommand(const EncodeCommandOptions& options, std::ostream& out);
void runDecodeCommand(const DecodeCommandOptions& options, std::ostream& out);

}  // namespace gradcomp
