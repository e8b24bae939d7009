// The self-describing wire format every codec writes:
//
//   [WireHeader: 48 bytes][section 0, padded to 16][section 1, padded to 16]...
//
// All integers little-endian. The header names the codec, its format flags (FP8 flavour, value type,
// bit width), the element count, block size, entry count of sparse codecs, and the payload length, and
// carries a checksum of itself. `parseHeader` validates every field against the buffer it got before a
// decoder reads the payload; the codec then checks the payload length against what its layout needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace gradcomp {

inline constexpr uint32_t kWireMagic = 0x504d4347u;  // "GCMP"
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kWireAlign = 16;

// Stable numbers on the wire: never renumber, only append.
enum class CodecId : uint16_t {
  None = 1,
  Fp16 = 2,
  Bf16 = 3,
  Fp8E4M3 = 4,
  Fp8E5M2 = 5,
  Int8 = 6,
  Qsgd = 7,
  TernGrad = 8,
  TopK = 9,
  RandomK = 10,
  Threshold = 11,
  Sign = 12,
  OneBit = 13,
  MxFp8 = 14,  // flags: element format (0 E4M3, 1 E5M2)
  MxFp6 = 15,  // flags: 0 E2M3, 1 E3M2
  MxFp4 = 16,
  NvFp4 = 17,
  Int4 = 18,
};

// The registry name of a codec id, "unknown" for unassigned numbers (defined by the registry, whose
// rows pair each name with its id).
const char* codecIdName(uint16_t id);

struct WireHeader {
  uint32_t magic = kWireMagic;
  uint16_t version = kWireVersion;
  uint16_t codec = 0;
  uint32_t flags = 0;       // codec-specific format flags; unknown bits are an error
  uint32_t blockSize = 0;   // elements per scale block (0 for codecs without blocks)
  uint64_t numElements = 0;
  uint64_t count = 0;       // entries of a sparse payload; 0 otherwise
  uint64_t payloadBytes = 0;
  uint32_t param = 0;       // codec-specific 32-bit parameter (e.g. fp16 pre-scale as float bits)
  uint32_t checksum = 0;    // FNV-1a over the 44 bytes before it
};
static_assert(sizeof(WireHeader) == 48, "wire header layout");

inline constexpr size_t kWireHeaderBytes = sizeof(WireHeader);

uint32_t headerChecksum(const WireHeader& h);

// Writes the header (computing payloadBytes' checksum) at the start of `wire`.
void writeHeader(WireHeader h, std::span<std::byte> wire);

// Reads and validates the header: size, magic, version, checksum, payload within the buffer.
// Throws DecodeError naming the field. Codec-specific fields are checked by the codec.
WireHeader parseHeader(std::span<const std::byte> wire);
// The same checks for a buffer that is not in host memory (a CUDA buffer): `header` holds a host copy
// of its first min(48, bufferBytes) bytes, bufferBytes is the whole buffer's size.
WireHeader parseHeader(std::span<const std::byte> header, size_t bufferBytes);

// Byte offsets of consecutive 16-byte aligned sections; sizes are checked for overflow.
class SectionLayout {
 public:
  // Appends a section of `bytes` and returns its offset from the payload start. Throws DecodeError
  // (the sizes came from a header) if the running total overflows.
  uint64_t add(uint64_t bytes);
  uint64_t totalBytes() const { return total_; }

 private:
  uint64_t total_ = 0;
};

// Element count x bytes per element, for sizes read from a header: throws DecodeError on overflow.
uint64_t wireBytesFor(uint64_t count, uint64_t bytesPerElement, const char* what);

}  // namespace gradcomp
