// Base of the codecs that work block by block on contiguous elements (casts, block-scaled fp8/int8,
// qsgd, terngrad, sign, onebit). It owns the loop over tiles: a tile is a cache-resident run of whole
// blocks starting on a byte boundary of every bit-packed section, so tiles encode independently, can
// run on several threads, and error feedback is fused per tile:
//   c = g + e (tile buffer) -> encode tile -> decode tile -> e' = c - decoded
// which reads g and e and writes e' and the wire once: the "encode fused with ef" of the benchmarks.
#pragma once

#include <memory>

#include "compressors/compressor.h"
#include "kernels/scalar/philox.h"
#include "kernels/scalar/scale_limits.h"

namespace gradcomp {

// Whether a codec takes the keyed randomized Hadamard rotation (rotate=hadamard,rblock=256): the
// quantizing codecs whose error it spreads (int8, int4, fp8, the MX formats, nvfp4, sign, qsgd).
enum class Rotation { Unsupported, Supported };

class BlockCodec : public Compressor {
 public:
  // Offsets from the payload start and used bytes before padding; the base class zeroes the padding.
  struct Sections {
    int count = 0;
    uint64_t offset[2] = {0, 0};
    uint64_t bytes[2] = {0, 0};
    uint64_t total = 0;
  };

  using Compressor::maxEncodedBytes;
  size_t maxEncodedBytes(size_t numElements) const override;

  // What a codec's CUDA kernels get from the orchestration in compressors/cuda_paths.cc, which writes the
  // header, zeroes the padding, owns the counters and waits for the stream: the codec only launches its
  // kernels on `stream` (a cudaStream_t). Section pointers are device addresses.
  struct DeviceEncode {
    const WireHeader& h;
    const Sections& sec;
    std::byte* payload;
    const float* grad;
    const float* residualIn;  // null: a plain encode (residualOut null too)
    float* residualOut;
    uint64_t n;
    scalar::RngStream rng;           // (seed, rank, step, tensor) as the CPU path keys it
    unsigned long long* saturated;   // device counter: add saturations
    unsigned long long* firstBad;    // device minimum: the first NaN/Inf input index
    void* stream;
    std::byte* section(int i) const { return payload + sec.offset[i]; }
  };
  struct DeviceCheck {
    const WireHeader& h;
    const Sections& sec;
    const std::byte* payload;
    scalar::ScaleRule scaleRule;
    unsigned long long* firstBad;  // device minimum: set below ~0 when anything in the payload is invalid
    void* stream;
    uint64_t blocks() const;
    const std::byte* section(int i) const { return payload + sec.offset[i]; }
  };
  struct DeviceDecode {
    const WireHeader& h;
    const Sections& sec;
    const std::byte* payload;
    float* out;
    bool accumulate;
    void* stream;
    const std::byte* section(int i) const { return payload + sec.offset[i]; }
  };

 protected:
  // `spec` is the caller's (the registry checks afterwards that every parameter was read from it).
  BlockCodec(const CodecSpec& spec, uint32_t blockSize, Rotation rotation = Rotation::Unsupported);

  uint32_t blockSize() const { return blockSize_; }

  // What this configuration writes into the header's flags and param (codec-specific meaning).
  virtual uint32_t formatFlags() const { return 0; }
  virtual uint32_t formatParam() const { return 0; }
  // What a decoder accepts there; throw DecodeError naming the field. Defaults: both must be 0.
  virtual void validateFlags(uint32_t flags) const;
  virtual void validateParam(uint32_t param) const;
  // The payload's sections for a header; throws DecodeError if the sizes overflow.
  virtual Sections sections(const WireHeader& h) const = 0;
  // Encodes elements [begin, begin+count) of the tensor (x points at element `begin`). `begin` is a
  // multiple of the block size and of 8. Adds saturations to `saturated`. streamOut: the tensor is far
  // larger than the caches and nothing reads this tile back soon, so the codec may write its payload
  // with non-temporal stores (whole tiles are 16-byte aligned).
  virtual void encodeTile(const WireHeader& h, const float* x, uint64_t begin, uint64_t count, std::byte* payload,
                          const EncodeContext& ctx, uint64_t& saturated, bool streamOut) const = 0;
  // encodeTile after the tile's NaN/Inf scan: returns the first non-finite element's index in the tile
  // (kNoIndex if none; the payload is then unspecified, as the encode fails). Codecs that see every
  // value's magnitude anyway (a block maximum) override it to find NaN/Inf there, in the same pass.
  virtual uint64_t encodeTileChecked(const WireHeader& h, const float* x, uint64_t begin, uint64_t count,
                                     std::byte* payload, const EncodeContext& ctx, uint64_t& saturated,
                                     bool streamOut) const;
  // The fused error-feedback step for one tile: encodeTile, then residualOut[i] = c[i] - decoded[i]
  // (bit for bit what decodeTile and a subtraction give). Codecs whose encoder holds the decoded value
  // in a register override it; `scratch` holds `count` floats.
  virtual void encodeTileResidual(const WireHeader& h, const float* c, uint64_t begin, uint64_t count,
                                  std::byte* payload, const EncodeContext& ctx, uint64_t& saturated,
                                  float* residualOut, float* scratch) const {
    encodeTile(h, c, begin, count, payload, ctx, saturated, false);
    decodeTile(h, payload, begin, count, scratch, false);
    for (uint64_t i = 0; i < count; ++i) residualOut[i] = c[i] - scratch[i];
  }
  // Checks every code and scale of the payload; throws DecodeError naming the first bad one.
  virtual void validatePayload(const WireHeader& h, const std::byte* payload) const = 0;
  // What this codec's per-block scales must satisfy (kernels/scalar/scale_limits.h), for the CPU validator
  // and the CUDA check alike. Codecs without a scale section (the casts, onebit's mean pairs) keep the default.
  virtual scalar::ScaleRule scaleRule(const WireHeader&) const { return {}; }
  virtual void decodeTile(const WireHeader& h, const std::byte* payload, uint64_t begin, uint64_t count, float* out,
                          bool accumulate) const = 0;
  // Overwrite-decoding with the payload read once: codecs whose codes can be checked a tile at a time
  // (the casts, int8) check the tile's codes (and scales), then decode it, and return the first bad index in
  // the tile (kNoIndex: none). decodeImpl then zero-fills out and throws validatePayload's error, so a
  // rejected payload never leaves a partial decode. Default: no (validatePayload runs first).
  virtual bool validatesPerTile() const { return false; }
  // How many of the usual tiles (whole blocks of about 1024 values, so a separate NaN/Inf scan and the
  // encode read a tile from L1) one plain encode or checked decode tile spans. The casts check inside
  // their own pass and take 8: a cheap kernel pays its per-tile calls 8x less often.
  virtual uint64_t tileMultiple() const { return 1; }
  virtual uint64_t decodeTileValidated(const WireHeader&, const std::byte*, uint64_t, uint64_t, float*) const {
    return 0;
  }
  // The header param of one encode when it depends on the values (nvfp4's tensor scale): computed from
  // grad (+ residual when given), on the device when exec says so. Default: formatParam(), whatever the data.
  virtual uint32_t paramFor(const float* grad, const float* residual, uint64_t n, const ExecContext& exec) const;
  // True when paramFor reads the values: a rotated encode must then rotate the whole tensor before its
  // first tile (the param is the rotated tensor's), instead of rotating chunk by chunk as it encodes.
  virtual bool paramReadsValues() const { return false; }
  // A plain CPU encode's param, whose pass over the values may keep one word per block for the tiles in
  // `words` (nvfp4: each block's largest magnitude, so that its tiles do not find it again). Default:
  // paramFor's, nothing kept.
  virtual uint32_t paramKeepingBlockWords(const float* x, uint64_t n, const ExecContext& exec,
                                          std::unique_ptr<uint32_t[]>& words) const;
  // encodeTileChecked given the words paramKeepingBlockWords kept for the tile's blocks (words[0] is
  // block begin / blockSize's). Default: encodeTileChecked.
  virtual uint64_t encodeTileCheckedWithBlockWords(const WireHeader& h, const float* x, uint64_t begin, uint64_t count,
                                                   std::byte* payload, const EncodeContext& ctx, uint64_t& saturated,
                                                   bool streamOut, const uint32_t* words) const;

  // The codec's CUDA twin, beside its CPU path in the codec's own file (compiled where CUDA is,
  // GRADCOMP_HAVE_CUDA): launch the kernels on d.stream. The defaults refuse with BackendUnavailable
  // naming the codec.
  virtual void launchEncodeOnDevice(const DeviceEncode& d) const;
  virtual void launchCheckOnDevice(const DeviceCheck& d) const;
  virtual void launchDecodeOnDevice(const DeviceDecode& d) const;

  EncodeResult encodeImpl(std::span<const float> in, std::span<std::byte> wire, const EncodeContext& ctx,
                          const ExecContext& exec) const override;
  EncodeResult encodeWithResidualImpl(std::span<const float> grad, std::span<const float> residualIn,
                                      std::span<float> residualOut, std::span<std::byte> wire,
                                      const EncodeContext& ctx, const ExecContext& exec) const override;
  void checkHeader(const WireHeader& header) const override;
  uint64_t rotationBlock() const override { return rotationLog2_ ? uint64_t{1} << rotationLog2_ : 0; }
  void decodeImpl(const WireHeader& header, const std::byte* payload, std::span<float> out, DecodeMode mode,
                  const ExecContext& exec) const override;
  // CUDA: the header and sections above drive the kernels of compressors/cuda_paths.h.
  EncodeResult encodeOnDevice(std::span<const float> grad, std::span<const float> residualIn,
                              std::span<float> residualOut, std::span<std::byte> wire, const EncodeContext& ctx,
                              const ExecContext& exec) const override;
  void decodeOnDevice(const WireHeader& header, const std::byte* payload, std::span<float> out, DecodeMode mode,
                      const ExecContext& exec) const override;

 private:
  uint64_t tileElements(uint32_t blockSize) const;
  WireHeader headerFor(uint64_t n, uint32_t param) const;
  // rotate=hadamard: the encode and decode around the codec's own (block_codec.cc, "Rotation").
  EncodeResult encodeRotated(std::span<const float> grad, std::span<const float> residualIn,
                             std::span<float> residualOut, std::span<std::byte> wire, const EncodeContext& ctx,
                             const ExecContext& exec) const;
  EncodeResult encodeRotatedWhole(std::span<const float> grad, std::span<const float> residualIn,
                             std::span<float> residualOut, std::span<std::byte> wire, const EncodeContext& ctx,
                             const ExecContext& exec) const;
  void decodeRotated(const WireHeader& h, const std::byte* payload, std::span<float> out, DecodeMode mode,
                     const ExecContext& exec) const;
  EncodeResult encodeRotatedOnDevice(std::span<const float> grad, std::span<const float> residualIn,
                                     std::span<float> residualOut, std::span<std::byte> wire,
                                     const EncodeContext& ctx, const ExecContext& exec) const;
  void decodeRotatedOnDevice(const WireHeader& h, const std::byte* payload, std::span<float> out, DecodeMode mode,
                             const ExecContext& exec) const;
  // The device check of a payload; on a hit the CPU validator's DecodeError, from a host copy.
  void checkPayloadOnDevice(const WireHeader& h, const std::byte* payload, const ExecContext& exec) const;

  uint32_t blockSize_;        // 0 for codecs without blocks (casts)
  uint32_t rotationLog2_ = 0;  // log2 of the rotation block; 0: no rotation
};

// Calls fn(blockIndex, offsetInTile, length) for the blocks of a tile (tiles start on block boundaries).
template <typename Fn>
void forBlocksInTile(uint64_t begin, uint64_t count, uint32_t blockSize, Fn&& fn) {
  for (uint64_t off = 0; off < count; off += blockSize)
    fn((begin + off) / blockSize, off, count - off < blockSize ? count - off : uint64_t{blockSize});
}

// Whether decodeImpl's overwrite decode of this payload (into the caller's out, past 16 MiB) streams: out is
// then far larger than the caches, so its lines are written without being read first (decodeImpl fences
// each thread's streamed stores). Only there: the error-feedback path decodes into a scratch tile that is
// read right back.
inline bool streamsDecode(const WireHeader& h) { return h.numElements >= (uint64_t{1} << 22); }

// A per-thread scratch buffer of at least n bytes (one tile's codes before bit packing).
uint8_t* scratchCodes(uint64_t n);

// Shared parameter: a block size from the spec, validated (1 .. 2^24).
uint32_t blockSizeParam(const CodecSpec& spec, uint32_t fallback);

// The layout of the casts: one section of bytesPerElement per element.
BlockCodec::Sections valueSection(const WireHeader& h, uint64_t bytesPerElement, const char* what);

// The common layout [per-block scales: scaleBytesPerBlock each][codes: codeBits per element].
BlockCodec::Sections scaleAndCodeSections(const WireHeader& h, uint64_t scaleBytesPerBlock, uint64_t codeBits);

// Throws DecodeError naming the block and the accepted range if a scale breaks `rule`
// (kernels/scalar/scale_limits.h): non-finite, negative, zero when !allowZero, or a factor the decoder's
// product would overflow on.
void validateBlockScales(const float* scales, uint64_t numBlocks, const char* codec, const scalar::ScaleRule& rule);

}  // namespace gradcomp
