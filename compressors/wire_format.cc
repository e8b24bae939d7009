#include "compressors/wire_format.h"

#include <cstring>

#include "core/checked_math.h"
#include "core/error.h"

namespace gradcomp {

uint32_t headerChecksum(const WireHeader& h) {
  unsigned char bytes[sizeof(WireHeader)];
  std::memcpy(bytes, &h, sizeof(h));
  uint32_t hash = 2166136261u;
  for (size_t i = 0; i < offsetof(WireHeader, checksum); ++i) {
    hash ^= bytes[i];
    hash *= 16777619u;
  }
  return hash;
}

void writeHeader(WireHeader h, std::span<std::byte> wire) {
  GRADCOMP_CHECK_ARG(wire.size() >= kWireHeaderBytes, "wire buffer of ", wire.size(),
                     " bytes cannot hold the ", kWireHeaderBytes, "-byte header");
  h.magic = kWireMagic;
  h.version = kWireVersion;
  h.checksum = headerChecksum(h);
  std::memcpy(wire.data(), &h, sizeof(h));
}

WireHeader parseHeader(std::span<const std::byte> wire) { return parseHeader(wire, wire.size()); }

WireHeader parseHeader(std::span<const std::byte> header, size_t bufferBytes) {
  GRADCOMP_CHECK(bufferBytes >= kWireHeaderBytes && header.size() >= kWireHeaderBytes, DecodeError,
                 "truncated wire buffer: ", bufferBytes, " bytes, the header alone needs ", kWireHeaderBytes);
  WireHeader h;
  std::memcpy(&h, header.data(), sizeof(h));
  GRADCOMP_CHECK(h.magic == kWireMagic, DecodeError, "not a gradcomp wire buffer: magic 0x", std::hex, h.magic,
                 ", expected 0x", kWireMagic);
  GRADCOMP_CHECK(h.version == kWireVersion, DecodeError, "wire format version ", h.version,
                 " is not supported (this build reads version ", kWireVersion, ")");
  GRADCOMP_CHECK(h.checksum == headerChecksum(h), DecodeError, "corrupt wire header: checksum 0x", std::hex,
                 h.checksum, " does not match its fields (0x", headerChecksum(h), ")");
  GRADCOMP_CHECK(std::string_view(codecIdName(h.codec)) != "unknown", DecodeError, "unknown codec id ",
                 h.codec, " in wire header");
  const auto total = checkedAdd(kWireHeaderBytes, h.payloadBytes);
  GRADCOMP_CHECK(total && *total <= bufferBytes, DecodeError, "truncated wire buffer: header announces ",
                 h.payloadBytes, " payload bytes but only ", bufferBytes - kWireHeaderBytes, " follow it");
  return h;
}

uint64_t SectionLayout::add(uint64_t bytes) {
  const uint64_t offset = total_;
  const auto padded = checkedAlignUp(bytes, kWireAlign);
  const auto next = padded ? checkedAdd(total_, *padded) : std::nullopt;
  GRADCOMP_CHECK(next.has_value(), DecodeError, "wire section sizes overflow 64 bits");
  total_ = *next;
  return offset;
}

uint64_t wireBytesFor(uint64_t count, uint64_t bytesPerElement, const char* what) {
  const auto r = checkedMul(count, bytesPerElement);
  GRADCOMP_CHECK(r.has_value(), DecodeError, what, ": ", count, " x ", bytesPerElement,
                 " bytes overflows 64 bits");
  return *r;
}

}  // namespace gradcomp
