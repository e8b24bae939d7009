#include "compressors/compressor.h"

#include <cstring>
#include <vector>

#include "compressors/cuda_paths.h"
#include "core/error.h"
#include "kernels/cpu/microscaling_kernels.h"
#include "kernels/scalar/host_device.h"

namespace gradcomp {
namespace {

// CPU: a sane thread count. CUDA: a build with the kernels and a device that answers.
void checkExec(const ExecContext& exec, const char* codec, const char* op) {
  GRADCOMP_CHECK_ARG(exec.cpuThreads >= 1, op, ": cpuThreads must be >= 1, got ", exec.cpuThreads);
  if (exec.device == Device::Cuda) cudapath::requireDevice(exec, codec, op);
}

bool onDevice(const ExecContext& exec) { return exec.device == Device::Cuda; }

// x[i] for an error message, wherever x lives.
float valueAt(std::span<const float> x, uint64_t i, const ExecContext& exec) {
  return onDevice(exec) ? cudapath::readFloat(x.data() + i, exec) : x[i];
}

void checkWireBuffer(std::span<std::byte> wire, size_t need, const char* codec) {
  GRADCOMP_CHECK_ARG(wire.size() >= need, "encode '", codec, "': wire buffer has ", wire.size(),
                     " bytes, maxEncodedBytes says ", need);
  GRADCOMP_CHECK_ARG(reinterpret_cast<uintptr_t>(wire.data()) % kWireAlign == 0, "encode '", codec,
                     "': wire buffer must be ", kWireAlign, "-byte aligned");
}

void throwIfNonFinite(const EncodeResult& r, std::span<const float> x, const EncodeContext& ctx, const char* codec,
                      const ExecContext& exec) {
  if (r.nonFiniteIndex == EncodeResult::kNoIndex) return;
  const uint64_t i = r.nonFiniteIndex;
  throw NonFiniteError(__FILE__, __LINE__,
                       detail::concat("encode '", codec, "': tensor ", ctx.tensorId, " holds a non-finite value (",
                                      valueAt(x, i, exec), ") at index ", i, " of ", x.size()),
                       ctx.tensorId, i);
}

}  // namespace

uint64_t firstNonFinite(std::span<const float> x) {
  // The common all-finite case is one maximum of |bits| (the kernels' vector loop, which on AVX-512 also
  // asks for the lines 4 KiB ahead: this scan is an encoder's first read of its tile from memory, and the
  // hardware prefetchers alone left sign's encode spending half its time here); the index is searched
  // only when there is one.
  if (scalar::isFiniteBits(scalar::floatBits(cpu::absMax(x.data(), x.size())))) return EncodeResult::kNoIndex;
  const size_t i = scalar::firstNonFiniteIndex(x.data(), x.size());
  return i < x.size() ? i : EncodeResult::kNoIndex;
}

EncodeResult Compressor::encode(std::span<const float> in, std::span<std::byte> wire, const EncodeContext& ctx,
                                const ExecContext& exec) const {
  checkExec(exec, name(), "encode");
  checkWireBuffer(wire, maxEncodedBytes(in.size(), ctx), name());
  EncodeResult r = onDevice(exec) ? encodeOnDevice(in, {}, {}, wire, ctx, exec) : encodeImpl(in, wire, ctx, exec);
  throwIfNonFinite(r, in, ctx, name(), exec);
  return r;
}

EncodeResult Compressor::encodeWithResidual(std::span<const float> grad, std::span<const float> residualIn,
                                            std::span<float> residualOut, std::span<std::byte> wire,
                                            const EncodeContext& ctx, const ExecContext& exec) const {
  checkExec(exec, name(), "encodeWithResidual");
  GRADCOMP_CHECK_EQ(grad.size(), residualIn.size(), "codec=", name(), " tensor=", ctx.tensorId);
  GRADCOMP_CHECK_EQ(grad.size(), residualOut.size(), "codec=", name(), " tensor=", ctx.tensorId);
  checkWireBuffer(wire, maxEncodedBytes(grad.size(), ctx), name());
  EncodeResult r = onDevice(exec) ? encodeOnDevice(grad, residualIn, residualOut, wire, ctx, exec)
                                  : encodeWithResidualImpl(grad, residualIn, residualOut, wire, ctx, exec);
  if (r.nonFiniteIndex != EncodeResult::kNoIndex) {
    // Name the gradient's own bad index when it has one; otherwise the residual was the culprit.
    const uint64_t g = onDevice(exec) ? cudapath::firstNonFinite(grad.data(), grad.size(), exec) : firstNonFinite(grad);
    if (g != EncodeResult::kNoIndex) {
      r.nonFiniteIndex = g;
      throwIfNonFinite(r, grad, ctx, name(), exec);
    }
    const uint64_t i = r.nonFiniteIndex;
    throw NonFiniteError(__FILE__, __LINE__,
                         detail::concat("encodeWithResidual '", name(), "': tensor ", ctx.tensorId,
                                        ": the gradient is finite but gradient + residual is not at index ", i,
                                        " (residual ", valueAt(residualIn, i, exec), "): the residual is poisoned"),
                         ctx.tensorId, i);
  }
  return r;
}

EncodeResult Compressor::encodeWithResidualImpl(std::span<const float> grad, std::span<const float> residualIn,
                                                std::span<float> residualOut, std::span<std::byte> wire,
                                                const EncodeContext& ctx, const ExecContext& exec) const {
  for (size_t i = 0; i < grad.size(); ++i) residualOut[i] = grad[i] + residualIn[i];
  EncodeResult r = encodeImpl(residualOut, wire, ctx, exec);
  if (r.nonFiniteIndex != EncodeResult::kNoIndex) return r;
  std::vector<float> decoded(grad.size());
  decode(wire.first(r.wireBytes), decoded, DecodeMode::Overwrite, exec);
  for (size_t i = 0; i < grad.size(); ++i) residualOut[i] -= decoded[i];
  return r;
}

WireHeader Compressor::inspect(std::span<const std::byte> wire) const { return checkedForThisCodec(parseHeader(wire)); }

WireHeader Compressor::checkedForThisCodec(const WireHeader& h) const {
  GRADCOMP_CHECK(h.codec == static_cast<uint16_t>(id()), DecodeError, "wire holds codec '", codecIdName(h.codec),
                 "' (id ", h.codec, "), this decoder is '", name(), "'");
  checkHeader(h);
  return h;
}

EncodeResult Compressor::encodeOnDevice(std::span<const float>, std::span<const float>, std::span<float>,
                                        std::span<std::byte>, const EncodeContext&, const ExecContext&) const {
  GRADCOMP_THROW(BackendUnavailable, "codec '", name(), "' has no CUDA kernels: encode it from a host buffer");
}

void Compressor::decodeOnDevice(const WireHeader&, const std::byte*, std::span<float>, DecodeMode,
                                const ExecContext&) const {
  GRADCOMP_THROW(BackendUnavailable, "codec '", name(), "' has no CUDA kernels: decode it into a host buffer");
}

void Compressor::decode(std::span<const std::byte> wire, std::span<float> out, DecodeMode mode,
                        const ExecContext& exec) const {
  checkExec(exec, name(), "decode");
  if (onDevice(exec)) {
    // The header comes to the host and gets every check of the CPU path; the payload stays on the device.
    const WireHeader h = checkedForThisCodec(cudapath::parseDeviceHeader(wire.data(), wire.size(), exec));
    GRADCOMP_CHECK(h.numElements == out.size(), DecodeError, "decode '", name(), "': wire holds ", h.numElements,
                   " elements, output has ", out.size());
    const cudapath::AlignedPayload payload(wire.data() + kWireHeaderBytes, h.payloadBytes, exec);
    decodeOnDevice(h, payload.get(), out, mode, exec);
    return;
  }
  const WireHeader h = inspect(wire);
  GRADCOMP_CHECK(h.numElements == out.size(), DecodeError, "decode '", name(), "': wire holds ", h.numElements,
                 " elements, output has ", out.size());
  const std::byte* payload = wire.data() + kWireHeaderBytes;
  std::vector<std::byte> aligned;
  if (reinterpret_cast<uintptr_t>(payload) % kWireAlign != 0) {
    // A receive buffer at an odd offset: copy once rather than read typed values unaligned.
    aligned.resize(h.payloadBytes + kWireAlign);
    auto* p = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(aligned.data()) + kWireAlign - 1) &
                                           ~uintptr_t(kWireAlign - 1));
    std::memcpy(p, payload, h.payloadBytes);
    payload = p;
  }
  decodeImpl(h, payload, out, mode, exec);
}

}  // namespace gradcomp
