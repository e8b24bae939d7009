// The codecs' CUDA paths (see cuda_paths.h), built where CUDA is.
#include "compressors/cuda_paths.h"

#include <cuda_runtime_api.h>

#include "compressors/cuda_launch.h"

#include <cstring>
#include <vector>

#include "core/checked_math.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "kernels/cuda/sparse_kernels.cuh"
#include "kernels/cuda/hadamard_rotation.cuh"
#include "kernels/cuda/microscaling_kernels.cuh"
#include "kernels/cuda/validate_kernels.cuh"
#include "kernels/scalar/feistel_permutation.h"

namespace gradcomp::cudapath {
namespace {

cudaStream_t streamOf(const ExecContext& exec) { return static_cast<cudaStream_t>(exec.cudaStream); }

// Selects exec's device for the calling thread.
cudaStream_t enter(const ExecContext& exec) {
  GRADCOMP_CUDA_CHECK(cudaSetDevice(exec.cudaDevice));
  return streamOf(exec);
}

// What the encode kernels count on the device: saturations and the first NaN/Inf index.
struct EncodeCounters {
  unsigned long long saturated;
  unsigned long long firstBad;
};

class Counters {
 public:
  explicit Counters(cudaStream_t stream) : buffer_(1, stream), stream_(stream) {
    GRADCOMP_CUDA_CHECK(cudaMemsetAsync(buffer_.get(), 0, sizeof(EncodeCounters), stream));
    GRADCOMP_CUDA_CHECK(cudaMemsetAsync(&buffer_.get()->firstBad, 0xff, sizeof(unsigned long long), stream));
  }
  unsigned long long* saturated() const { return &buffer_.get()->saturated; }
  unsigned long long* firstBad() const { return &buffer_.get()->firstBad; }
  // Waits for the stream and returns the counts.
  EncodeCounters read() const {
    EncodeCounters host{};
    GRADCOMP_CUDA_CHECK(cudaMemcpyAsync(&host, buffer_.get(), sizeof(host), cudaMemcpyDeviceToHost, stream_));
    GRADCOMP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return host;
  }

 private:
  DeviceScratch<EncodeCounters> buffer_;
  cudaStream_t stream_;
};

void writeDeviceHeader(const WireHeader& h, std::byte* wire, cudaStream_t stream) {
  std::byte host[kWireHeaderBytes];
  writeHeader(h, std::span<std::byte>(host, kWireHeaderBytes));
  // A pageable source: the copy has consumed `host` when the call returns.
  GRADCOMP_CUDA_CHECK(cudaMemcpyAsync(wire, host, kWireHeaderBytes, cudaMemcpyHostToDevice, stream));
}

// The CPU's zeroPadding on the device: each section's padding and its last used byte.
void zeroPaddingOnDevice(const BlockCodec::Sections& sec, std::byte* payload, cudaStream_t stream) {
  for (int s = 0; s < sec.count; ++s) {
    const uint64_t end = s + 1 < sec.count ? sec.offset[s + 1] : sec.total;
    const uint64_t from = sec.offset[s] + (sec.bytes[s] ? sec.bytes[s] - 1 : 0);
    if (end > from) GRADCOMP_CUDA_CHECK(cudaMemsetAsync(payload + from, 0, end - from, stream));
  }
}

}  // namespace

bool compiledIn() { return true; }

void check(cudaError_t err, const char* what) {
  if (err == cudaErrorAssert)
    GRADCOMP_THROW(Error, what, ": a CUDA selection broke its own invariant (count mismatch); please report");
  GRADCOMP_CHECK(err == cudaSuccess, BackendUnavailable, what, " failed: ", cudaGetErrorString(err));
}

void requireDevice(const ExecContext& exec, const char* codec, const char* op) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  GRADCOMP_CHECK(err == cudaSuccess && count > 0, BackendUnavailable, op, " with codec '", codec,
                 "' on a CUDA buffer: no CUDA device is available (",
                 err == cudaSuccess ? "none found" : cudaGetErrorString(err), ")");
  GRADCOMP_CHECK(exec.cudaDevice >= 0 && exec.cudaDevice < count, BackendUnavailable, op, " with codec '", codec,
                 "': CUDA device ", exec.cudaDevice, " does not exist (", count, " visible)");
}

void copyToHost(void* dst, const void* src, size_t bytes, const ExecContext& exec) {
  if (bytes == 0) return;
  const cudaStream_t stream = enter(exec);
  GRADCOMP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
  GRADCOMP_CUDA_CHECK(cudaStreamSynchronize(stream));
}

float readFloat(const float* p, const ExecContext& exec) {
  float v = 0;
  copyToHost(&v, p, sizeof(v), exec);
  return v;
}

uint64_t firstNonFinite(const float* x, size_t n, const ExecContext& exec) {
  uint64_t first = EncodeResult::kNoIndex;
  check(cuda::findNonFinite(x, n, &first, enter(exec)), "NaN/Inf scan");
  return first == cuda::kNoIndex ? EncodeResult::kNoIndex : first;
}

WireHeader parseDeviceHeader(const std::byte* wire, size_t bytes, const ExecContext& exec) {
  std::byte host[kWireHeaderBytes] = {};
  const size_t have = std::min(bytes, kWireHeaderBytes);
  copyToHost(host, wire, have, exec);
  return parseHeader(std::span<const std::byte>(host, have), bytes);
}

AlignedPayload::AlignedPayload(const std::byte* payload, uint64_t bytes, const ExecContext& exec) : source_(payload) {
  if (reinterpret_cast<uintptr_t>(payload) % kWireAlign == 0 || bytes == 0) return;
  const cudaStream_t stream = enter(exec);
  // cudaMalloc'd memory is at least 256-byte aligned.
  GRADCOMP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&data_), bytes, stream));
  GRADCOMP_CUDA_CHECK(cudaMemcpyAsync(data_, payload, bytes, cudaMemcpyDeviceToDevice, stream));
  exec_ = exec;
}

AlignedPayload::~AlignedPayload() {
  if (data_) cudaFreeAsync(data_, streamOf(exec_));
}

// ---------------------------------------------------------------- block codecs

EncodeResult encodeBlock(const WireHeader& h, const BlockCodec::Sections& sec, const EncodeBuffers& io,
                         const EncodeContext& ctx, const ExecContext& exec,
                         const std::function<void(const BlockCodec::DeviceEncode&)>& launch,
                         const WireHeader* codecHeader, std::span<const std::byte> prefix) {
  const cudaStream_t stream = enter(exec);
  writeDeviceHeader(h, io.wire, stream);
  if (!prefix.empty())  // pageable source: consumed when the call returns
    GRADCOMP_CUDA_CHECK(cudaMemcpyAsync(io.wire + kWireHeaderBytes, prefix.data(), prefix.size(),
                                        cudaMemcpyHostToDevice, stream));
  std::byte* payload = io.wire + kWireHeaderBytes + prefix.size();
  zeroPaddingOnDevice(sec, payload, stream);
  Counters counters(stream);
  launch(BlockCodec::DeviceEncode{codecHeader ? *codecHeader : h, sec, payload, io.grad, io.residualIn, io.residualOut, io.n,
                                  scalar::RngStream::make(ctx.seed, ctx.rank, ctx.step, ctx.tensorId),
                                  counters.saturated(), counters.firstBad(), stream});
  const EncodeCounters c = counters.read();
  EncodeResult result;
  result.wireBytes = kWireHeaderBytes + h.payloadBytes;
  result.saturated = c.saturated;
  result.nonFiniteIndex = c.firstBad == ~0ull ? EncodeResult::kNoIndex : c.firstBad;
  return result;
}

bool blockPayloadHasInvalid(const WireHeader& h, const BlockCodec::Sections& sec, const std::byte* payload,
                            const scalar::ScaleRule& scaleRule, const ExecContext& exec,
                            const std::function<void(const BlockCodec::DeviceCheck&)>& launch) {
  const cudaStream_t stream = enter(exec);
  Counters counters(stream);
  launch(BlockCodec::DeviceCheck{h, sec, payload, scaleRule, counters.firstBad(), stream});
  return counters.read().firstBad != ~0ull;
}

void decodeBlock(const WireHeader& h, const BlockCodec::Sections& sec, const std::byte* payload, float* out,
                 bool accumulate, const ExecContext& exec,
                 const std::function<void(const BlockCodec::DeviceDecode&)>& launch) {
  const cudaStream_t stream = enter(exec);
  launch(BlockCodec::DeviceDecode{h, sec, payload, out, accumulate, stream});
  GRADCOMP_CUDA_CHECK(cudaStreamSynchronize(stream));
}

// ---------------------------------------------------------------- rotation

DeviceFloats::DeviceFloats(size_t n, const ExecContext& exec, bool zeroed) : exec_(exec) {
  const cudaStream_t stream = enter(exec);
  GRADCOMP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(float), stream));
  if (zeroed) GRADCOMP_CUDA_CHECK(cudaMemsetAsync(p_, 0, n * sizeof(float), stream));
}

DeviceFloats::~DeviceFloats() {
  if (p_) cudaFreeAsync(p_, streamOf(exec_));
}

void rotateOnDevice(const float* x, const float* e, float* y, size_t n, size_t blockSize, uint64_t seed, uint32_t step,
                    uint32_t tensor, float scale, bool inverse, const ExecContext& exec) {
  check(cuda::launchRotate(x, e, y, n, blockSize, scalar::RotationKey{seed, step, tensor}, scale, inverse, enter(exec)),
        inverse ? "inverse rotation" : "rotation");
}

void addOnDevice(const float* g, const float* e, size_t n, float* c, const ExecContext& exec) {
  const cudaStream_t stream = enter(exec);
  if (e) {
    check(cuda::launchAdd(g, e, n, c, stream), "add residual");
  } else if (n && g != c) {
    GRADCOMP_CUDA_CHECK(cudaMemcpyAsync(c, g, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  }
}

float absMaxOnDevice(const float* x, size_t n, const ExecContext& exec) {
  const cudaStream_t stream = enter(exec);
  DeviceScratch<unsigned> bits(1, stream);
  GRADCOMP_CUDA_CHECK(cudaMemsetAsync(bits.get(), 0, sizeof(unsigned), stream));
  check(cuda::launchAbsMaxBits(x, nullptr, n, bits.get(), stream), "amax");
  unsigned host = 0;
  copyToHost(&host, bits.get(), sizeof(host), exec);
  return scalar::bitsToFloat(host);
}

void writeOutOnDevice(const float* y, size_t n, float* out, bool accumulate, const ExecContext& exec) {
  const cudaStream_t stream = enter(exec);
  if (accumulate) {
    check(cuda::launchAdd(out, y, n, out, stream), "accumulate");
  } else if (n) {
    GRADCOMP_CUDA_CHECK(cudaMemcpyAsync(out, y, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  }
  GRADCOMP_CUDA_CHECK(cudaStreamSynchronize(stream));
}

// ---------------------------------------------------------------- topk / threshold

namespace {

// The sparse wire sections for `count` entries (sparse_payload.h's layout), zero padding included.
cuda::SparseOutput sparseOutputFor(std::byte* wire, CodecId codec, uint64_t n, uint64_t count, bool fp16Values,
                                   float* residual, cudaStream_t stream) {
  WireHeader h;
  h.codec = static_cast<uint16_t>(codec);
  h.flags = sparseFlags(n, fp16Values);
  h.numElements = n;
  h.count = count;
  const SparseLayout l = sparseLayout(count, h.flags);
  h.payloadBytes = l.total;
  writeDeviceHeader(h, wire, stream);
  std::byte* payload = wire + kWireHeaderBytes;
  const uint64_t indexBytes = count * (l.wideIndices ? 8 : 4), valueBytes = count * (l.fp16Values ? 2 : 4);
  if (l.valueOffset > l.indexOffset + indexBytes)
    GRADCOMP_CUDA_CHECK(cudaMemsetAsync(payload + l.indexOffset + indexBytes, 0,
                                        l.valueOffset - l.indexOffset - indexBytes, stream));
  if (l.total > l.valueOffset + valueBytes)
    GRADCOMP_CUDA_CHECK(cudaMemsetAsync(payload + l.valueOffset + valueBytes, 0, l.total - l.valueOffset - valueBytes,
                                        stream));
  cuda::SparseOutput out;
  out.indices = payload + l.indexOffset;
  out.wideIndices = l.wideIndices;
  out.values = payload + l.valueOffset;
  out.fp16Values = l.fp16Values;
  out.residual = residual;
  return out;
}

}  // namespace

EncodeResult encodeIndexValue(CodecId codec, const SparsePlan& plan, const EncodeBuffers& io,
                              const ExecContext& exec) {
  const cudaStream_t stream = enter(exec);
  EncodeResult r;
  const float* c = io.grad;
  if (io.residualIn) {  // c = g + e lives in residualOut; only the sent coordinates change after encoding
    check(cuda::launchAdd(io.grad, io.residualIn, io.n, io.residualOut, stream), "add residual");
    c = io.residualOut;
  }
  uint64_t entries = plan.k, firstBad = cuda::kNoIndex;
  bool overflow = plan.k == 0;
  if (plan.threshold && plan.k) {
    uint64_t count = 0;
    check(cuda::thresholdSelect(
              c, io.n, plan.k, plan.minSample, plan.sampleOffset, plan.capacity,
              [&](uint64_t got) {
                return sparseOutputFor(io.wire, codec, io.n, got, plan.fp16Values, io.residualOut, stream);
              },
              &count, &overflow, &firstBad, stream),
          "threshold selection");
    entries = count;
    r.exactFallback = overflow;
  }
  if (plan.k == 0) {  // nothing to send: an empty payload, as the CPU writes
    entries = 0;
    sparseOutputFor(io.wire, codec, io.n, 0, plan.fp16Values, nullptr, stream);
  } else if (!plan.threshold || overflow) {
    entries = plan.k;
    const cuda::SparseOutput out = sparseOutputFor(io.wire, codec, io.n, plan.k, plan.fp16Values, io.residualOut, stream);
    check(cuda::exactTopK(c, io.n, plan.k, out, &firstBad, stream), "top-k selection");
  }
  GRADCOMP_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (firstBad != cuda::kNoIndex) {
    r.nonFiniteIndex = firstBad;
    return r;
  }
  r.entries = entries;
  r.wireBytes = kWireHeaderBytes + sparseLayout(entries, sparseFlags(io.n, plan.fp16Values)).total;
  return r;
}

bool sparsePayloadHasInvalid(const WireHeader& h, const std::byte* payload, const ExecContext& exec) {
  const cudaStream_t stream = enter(exec);
  const SparseLayout l = sparseLayout(h.count, h.flags);
  Counters counters(stream);
  check(cuda::launchFindBadSparseEntries(payload + l.indexOffset, l.wideIndices, payload + l.valueOffset,
                                         l.fp16Values, h.count, h.numElements, counters.firstBad(), stream),
        "sparse payload check");
  return counters.read().firstBad != ~0ull;
}

void decodeIndexValue(const WireHeader& h, const std::byte* payload, float* out, bool accumulate,
                      const ExecContext& exec) {
  const cudaStream_t stream = enter(exec);
  const SparseLayout l = sparseLayout(h.count, h.flags);
  if (!accumulate && h.numElements)
    GRADCOMP_CUDA_CHECK(cudaMemsetAsync(out, 0, h.numElements * sizeof(float), stream));
  check(cuda::launchScatterSparse(payload + l.indexOffset, l.wideIndices, payload + l.valueOffset, l.fp16Values,
                                  h.count, out, accumulate, stream), "sparse scatter");
  GRADCOMP_CUDA_CHECK(cudaStreamSynchronize(stream));
}

// ---------------------------------------------------------------- random-k

EncodeResult encodeRandomK(const RandomKPlan& plan, const EncodeBuffers& io, const ExecContext& exec) {
  const cudaStream_t stream = enter(exec);
  EncodeResult r;
  const float* c = io.grad;
  if (io.residualIn) {
    check(cuda::launchAdd(io.grad, io.residualIn, io.n, io.residualOut, stream), "add residual");
    c = io.residualOut;
  }
  r.nonFiniteIndex = firstNonFinite(c, io.n, exec);
  if (r.nonFiniteIndex != EncodeResult::kNoIndex) return r;
  writeDeviceHeader(plan.header, io.wire, stream);
  std::byte* payload = io.wire + kWireHeaderBytes;
  GRADCOMP_CUDA_CHECK(cudaMemsetAsync(payload, 0, plan.header.payloadBytes, stream));
  GRADCOMP_CUDA_CHECK(cudaMemcpyAsync(payload, plan.key, sizeof(plan.key), cudaMemcpyHostToDevice, stream));
  const auto perm = scalar::FeistelPermutation::make(io.n, plan.seed, plan.step, plan.tensor);
  Counters counters(stream);
  check(cuda::launchRandomKGather(c, perm, plan.header.count, payload + plan.valueOffset, plan.fp16Values, plan.scale,
                                  io.residualIn ? io.residualOut : nullptr, counters.saturated(), stream),
        "random-k gather");
  r.saturated = counters.read().saturated;  // waits for the stream
  r.wireBytes = kWireHeaderBytes + plan.header.payloadBytes;
  r.entries = plan.header.count;
  return r;
}

bool randomKValuesHaveInvalid(const WireHeader& h, const std::byte* values, bool fp16Values, float scale,
                              const ExecContext& exec) {
  const cudaStream_t stream = enter(exec);
  Counters counters(stream);
  check(cuda::launchFindNonFiniteValues(values, fp16Values, scale, h.count, counters.firstBad(), stream), "random-k check");
  return counters.read().firstBad != ~0ull;
}

void decodeRandomK(const WireHeader& h, const std::byte* values, bool fp16Values, float scale, uint64_t seed,
                   uint32_t step, uint32_t tensor, float* out, bool accumulate, const ExecContext& exec) {
  const cudaStream_t stream = enter(exec);
  if (!accumulate && h.numElements)
    GRADCOMP_CUDA_CHECK(cudaMemsetAsync(out, 0, h.numElements * sizeof(float), stream));
  const auto perm = scalar::FeistelPermutation::make(h.numElements, seed, step, tensor);
  check(cuda::launchRandomKScatter(values, fp16Values, perm, h.count, scale, out, stream), "random-k scatter");
  GRADCOMP_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace gradcomp::cudapath
