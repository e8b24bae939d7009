// The codecs' CUDA paths in a build without CUDA: every entry point refuses with a BackendUnavailable
// that says how to get them (requireDevice is the one the codecs call first; the rest are never
// reached, and refuse the same way should a caller get past it).
#include "compressors/cuda_paths.h"

#include "core/error.h"

namespace gradcomp::cudapath {
namespace {

[[noreturn]] void refuse(const char* what) {
  GRADCOMP_THROW(BackendUnavailable, what,
                 " on a CUDA buffer: this build has no CUDA kernels (configure with GRADCOMP_WITH_CUDA=ON where nvcc "
                 "is installed)");
}

}  // namespace

bool compiledIn() { return false; }

void requireDevice(const ExecContext&, const char* codec, const char* op) {
  GRADCOMP_THROW(BackendUnavailable, op, " with codec '", codec,
                 "' on a CUDA buffer: this build has no CUDA kernels (configure with GRADCOMP_WITH_CUDA=ON where nvcc "
                 "is installed)");
}

void copyToHost(void*, const void*, size_t, const ExecContext&) { refuse("a device-to-host copy"); }
float readFloat(const float*, const ExecContext&) { refuse("a device read"); }
uint64_t firstNonFinite(const float*, size_t, const ExecContext&) { refuse("a NaN/Inf scan"); }
WireHeader parseDeviceHeader(const std::byte*, size_t, const ExecContext&) { refuse("decode"); }
AlignedPayload::AlignedPayload(const std::byte* payload, uint64_t, const ExecContext&) : source_(payload) {
  refuse("decode");
}
AlignedPayload::~AlignedPayload() = default;

EncodeResult encodeBlock(const WireHeader&, const BlockCodec::Sections&, const EncodeBuffers&, const EncodeContext&,
                         const ExecContext&, const std::function<void(const BlockCodec::DeviceEncode&)>&,
                         const WireHeader*, std::span<const std::byte>) {
  refuse("encode");
}
DeviceFloats::DeviceFloats(size_t, const ExecContext&, bool) { refuse("a device buffer"); }
DeviceFloats::~DeviceFloats() = default;
void rotateOnDevice(const float*, const float*, float*, size_t, size_t, uint64_t, uint32_t, uint32_t, float, bool,
                    const ExecContext&) {
  refuse("a rotation");
}
void addOnDevice(const float*, const float*, size_t, float*, const ExecContext&) { refuse("an addition"); }
float absMaxOnDevice(const float*, size_t, const ExecContext&) { refuse("a maximum"); }
void writeOutOnDevice(const float*, size_t, float*, bool, const ExecContext&) { refuse("decode"); }
bool blockPayloadHasInvalid(const WireHeader&, const BlockCodec::Sections&, const std::byte*, const scalar::ScaleRule&,
                            const ExecContext&, const std::function<void(const BlockCodec::DeviceCheck&)>&) {
  refuse("decode");
}
void decodeBlock(const WireHeader&, const BlockCodec::Sections&, const std::byte*, float*, bool, const ExecContext&,
                 const std::function<void(const BlockCodec::DeviceDecode&)>&) {
  refuse("decode");
}
EncodeResult encodeIndexValue(CodecId, const SparsePlan&, const EncodeBuffers&, const ExecContext&) {
  refuse("encode");
}
bool sparsePayloadHasInvalid(const WireHeader&, const std::byte*, const ExecContext&) { refuse("decode"); }
void decodeIndexValue(const WireHeader&, const std::byte*, float*, bool, const ExecContext&) { refuse("decode"); }
EncodeResult encodeRandomK(const RandomKPlan&, const EncodeBuffers&, const ExecContext&) { refuse("encode"); }
bool randomKValuesHaveInvalid(const WireHeader&, const std::byte*, bool, float, const ExecContext&) { refuse("decode"); }
void decodeRandomK(const WireHeader&, const std::byte*, bool, float, uint64_t, uint32_t, uint32_t, float*, bool,
                   const ExecContext&) {
  refuse("decode");
}

}  // namespace gradcomp::cudapath
