// ef:scale=auto's step (error_feedback.h): one definition shared by the error-feedback policy and the
// PyTorch hook's per-parameter encode (python/src/parts_binding.cc), so that both send the same bytes
// and keep the same residual for the same gradient.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "compressors/compressor.h"

namespace gradcomp {

// The factor gamma that ef:scale=auto encodes c with: 1 / (1 + omega) for a codec whose variance bound
// omega (Compressor::varianceBound) is >= 1, which is not contractive as it is; 1 below, where plain ef
// applies unchanged (the codec is contractive with delta = 1 - omega).
double scaledFeedbackGamma(double omega);

// c = grad + residualIn; wire = C(gamma c); residualOut = c - D(wire). residualIn may be residualOut
// (the residual is written only after the encode succeeded, so a NonFiniteError leaves it whole). Host
// buffers; `scratch` is resized to 2 * grad.size() floats and reused across calls.
EncodeResult encodeScaledWithResidual(const Compressor& codec, float gamma, std::span<const float> grad,
                                      std::span<const float> residualIn, std::span<float> residualOut,
                                      std::span<std::byte> wire, const EncodeContext& ctx, std::vector<float>& scratch,
                                      const ExecContext& exec = {});

}  // namespace gradcomp
