// SHA-256 (FIPS 180-4), for content fingerprints that must not collide by accident: the golden wire
// hashes that pin every codec's bytes across CPUs and builds, checkpoint checksums, and the resolved
// configuration a sweep run was made from. Not used for anything secret.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace gradcomp {

class Sha256 {
 public:
  Sha256();
  Sha256& update(std::span<const std::byte> data);
  Sha256& update(std::string_view text) { return update(std::as_bytes(std::span(text.data(), text.size()))); }
  std::array<uint8_t, 32> digest();  // finishes; the object must not be updated afterwards
  std::string hexDigest();           // 64 lowercase hex digits

 private:
  void compress(const uint8_t* block);

  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t totalBytes_ = 0;
};

std::string sha256Hex(std::span<const std::byte> data);
std::string sha256Hex(std::string_view text);

}  // namespace gradcomp
