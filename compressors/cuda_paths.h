// The codecs' CUDA paths: what Compressor::encode / encodeWithResidual / decode do when the
// ExecContext says the buffers live on a CUDA device. Host orchestration of the kernels in
// kernels/cuda/: the same header, the same payload bytes, the same residuals and the same errors as the
// CPU path (payload checks run on the device; on a hit the payload is copied back and the CPU
// validator names the problem).
//
// Every call runs on exec.cudaStream (null: the legacy default stream) of exec.cudaDevice and waits for
// it before returning: the EncodeResult (wire bytes, saturations, NaN/Inf index) is known on return,
// and every CUDA buffer may be reused. Without CUDA compiled in (cuda_paths_unavailable.cc) every
// entry point throws BackendUnavailable saying so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "compressors/block_codec.h"
#include "compressors/compressor.h"
#include "compressors/sparse_payload.h"

namespace gradcomp::cudapath {

// True when this build has the CUDA kernels.
bool compiledIn();

// Throws BackendUnavailable unless this build has CUDA and exec.cudaDevice answers; names the codec
// and the operation.
void requireDevice(const ExecContext& exec, const char* codec, const char* op);

// Device <-> host copies on exec's stream (waits).
void copyToHost(void* dst, const void* src, size_t bytes, const ExecContext& exec);
float readFloat(const float* p, const ExecContext& exec);
// Smallest index of x (device) holding NaN/Inf, or EncodeResult::kNoIndex.
uint64_t firstNonFinite(const float* x, size_t n, const ExecContext& exec);

// The validated header of a device wire buffer of `bytes` bytes (parseHeader's checks).
WireHeader parseDeviceHeader(const std::byte* wire, size_t bytes, const ExecContext& exec);

// A 16-byte aligned device copy of a payload received at an odd offset (the CPU path copies too).
class AlignedPayload {
 public:
  AlignedPayload(const std::byte* payload, uint64_t bytes, const ExecContext& exec);
  ~AlignedPayload();
  AlignedPayload(const AlignedPayload&) = delete;
  AlignedPayload& operator=(const AlignedPayload&) = delete;
  const std::byte* get() const { return data_ ? data_ : source_; }

 private:
  const std::byte* source_;
  std::byte* data_ = nullptr;
  ExecContext exec_;
};

// A 16-byte aligned host copy of a device payload: what a codec hands its CPU validator when the device
// check found something, so the error names the problem exactly as on the CPU path.
class HostPayloadCopy {
 public:
  HostPayloadCopy(const std::byte* devicePayload, uint64_t bytes, const ExecContext& exec) : buffer_(bytes + kWireAlign) {
    const auto raw = reinterpret_cast<uintptr_t>(buffer_.data());
    data_ = buffer_.data() + ((kWireAlign - raw % kWireAlign) % kWireAlign);
    copyToHost(data_, devicePayload, bytes, exec);
  }
  const std::byte* get() const { return data_; }

 private:
  std::vector<std::byte> buffer_;
  std::byte* data_;
};

// The device buffers of one encode. residualIn null: a plain encode (residualOut null too).
struct EncodeBuffers {
  const float* grad = nullptr;
  const float* residualIn = nullptr;
  float* residualOut = nullptr;
  size_t n = 0;
  std::byte* wire = nullptr;

  // From encodeOnDevice's arguments (an empty residualIn: a plain encode).
  static EncodeBuffers of(std::span<const float> grad, std::span<const float> residualIn,
                          std::span<float> residualOut, std::span<std::byte> wire) {
    EncodeBuffers io;
    io.grad = grad.data();
    io.residualIn = residualIn.empty() ? nullptr : residualIn.data();
    io.residualOut = residualIn.empty() ? nullptr : residualOut.data();
    io.n = grad.size();
    io.wire = wire.data();
    return io;
  }
};

// ---- block codecs: the layout and configuration come from the header the CPU encoder writes (h) and its
// sections; the codec's own launch function (BlockCodec::launch*OnDevice, in the codec's file) runs its
// kernels, this orchestration does the rest (header, padding, counters, stream).
// `h` is written to the wire; the codec's sections start after `prefix` (copied right after the header:
// the rotation section), and `codecHeader` (default: h) is what the codec's launch sees.
EncodeResult encodeBlock(const WireHeader& h, const BlockCodec::Sections& sec, const EncodeBuffers& io,
                         const EncodeContext& ctx, const ExecContext& exec,
                         const std::function<void(const BlockCodec::DeviceEncode&)>& launch,
                         const WireHeader* codecHeader = nullptr, std::span<const std::byte> prefix = {});
// True when the codec's device check finds an invalid scale or code in the payload.
bool blockPayloadHasInvalid(const WireHeader& h, const BlockCodec::Sections& sec, const std::byte* payload,
                            const scalar::ScaleRule& scaleRule, const ExecContext& exec,
                            const std::function<void(const BlockCodec::DeviceCheck&)>& launch);
void decodeBlock(const WireHeader& h, const BlockCodec::Sections& sec, const std::byte* payload, float* out,
                 bool accumulate, const ExecContext& exec,
                 const std::function<void(const BlockCodec::DeviceDecode&)>& launch);

// ---- the keyed Hadamard rotation on device buffers (kernels/cuda/hadamard_rotation.cuh)

// n floats of stream-ordered device memory on exec's device (zeroed when asked).
class DeviceFloats {
 public:
  DeviceFloats(size_t n, const ExecContext& exec, bool zeroed = false);
  ~DeviceFloats();
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* get() const { return p_; }

 private:
  float* p_ = nullptr;
  ExecContext exec_;
};

// Forward: y = H D ((x + e) x scale) / sqrt(b), e may be null; inverse: y = D H x / sqrt(b) x scale
// (saturating). y may alias x.
void rotateOnDevice(const float* x, const float* e, float* y, size_t n, size_t blockSize, uint64_t seed, uint32_t step,
                    uint32_t tensor, float scale, bool inverse, const ExecContext& exec);
// c = g + e on the device (e may be null: a copy).
void addOnDevice(const float* g, const float* e, size_t n, float* c, const ExecContext& exec);
// max |x| over the device array (>= Inf when x holds NaN/Inf).
float absMaxOnDevice(const float* x, size_t n, const ExecContext& exec);
// out = y, or out += y.
void writeOutOnDevice(const float* y, size_t n, float* out, bool accumulate, const ExecContext& exec);

// ---- index/value codecs (topk, threshold)
struct SparsePlan {
  uint64_t k = 0;             // entries topk sends / threshold aims at
  uint64_t capacity = 0;      // most entries the wire may hold
  bool threshold = false;     // DGC's sampled threshold instead of exact top-k
  uint64_t minSample = 0;     // threshold: sample size floor
  uint64_t sampleOffset = 0;  // threshold: the strided sample's start (a Philox word)
  bool fp16Values = false;
};
EncodeResult encodeIndexValue(CodecId codec, const SparsePlan& plan, const EncodeBuffers& io,
                              const ExecContext& exec);
bool sparsePayloadHasInvalid(const WireHeader& h, const std::byte* payload, const ExecContext& exec);
void decodeIndexValue(const WireHeader& h, const std::byte* payload, float* out, bool accumulate,
                      const ExecContext& exec);

// ---- random-k: the header and key bytes come from the codec; values are gathered by the permutation.
struct RandomKPlan {
  WireHeader header;           // count = k, payloadBytes set
  std::byte key[16];           // seed, step, tensor as the CPU writes them
  uint64_t valueOffset = 0;
  bool fp16Values = false;
  float scale = 1.0f;          // n / k when unbiased
  uint64_t seed = 0;
  uint32_t step = 0, tensor = 0;
};
EncodeResult encodeRandomK(const RandomKPlan& plan, const EncodeBuffers& io, const ExecContext& exec);
// Values that are not finite, or whose product with `scale` (n/k when unbiased, else 1) is not.
bool randomKValuesHaveInvalid(const WireHeader& h, const std::byte* values, bool fp16Values, float scale,
                              const ExecContext& exec);
void decodeRandomK(const WireHeader& h, const std::byte* values, bool fp16Values, float scale, uint64_t seed,
                   uint32_t step, uint32_t tensor, float* out, bool accumulate, const ExecContext& exec);

}  // namespace gradcomp::cudapath
