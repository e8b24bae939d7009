#include "compressors/scaled_error_feedback.h"

#include "core/error.h"

namespace gradcomp {

double scaledFeedbackGamma(double omega) { return omega >= 1.0 ? 1.0 / (1.0 + omega) : 1.0; }

EncodeResult encodeScaledWithResidual(const Compressor& codec, float gamma, std::span<const float> grad,
                                      std::span<const float> residualIn, std::span<float> residualOut,
                                      std::span<std::byte> wire, const EncodeContext& ctx, std::vector<float>& scratch,
                                      const ExecContext& exec) {
  const size_t n = grad.size();
  GRADCOMP_CHECK_ARG(residualIn.size() == n && residualOut.size() == n, "ef:scale=auto: residuals of ",
                     residualIn.size(), " and ", residualOut.size(), " values for a gradient of ", n);
  GRADCOMP_CHECK_ARG(exec.device == Device::Cpu, "ef:scale=auto runs on host buffers");
  scratch.resize(2 * n);
  float* c = scratch.data();
  float* sent = scratch.data() + n;
  for (size_t i = 0; i < n; ++i) {
    c[i] = grad[i] + residualIn[i];
    sent[i] = gamma * c[i];
  }
  const EncodeResult r = codec.encode({sent, n}, wire, ctx, exec);
  codec.decode(wire.first(r.wireBytes), {sent, n}, DecodeMode::Overwrite, exec);
  for (size_t i = 0; i < n; ++i) residualOut[i] = c[i] - sent[i];
  return r;
}

}  // namespace gradcomp
