#include "training/checkpoint.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/sha256.h"

namespace gradcomp {

namespace {

constexpr uint64_t kMagic = 0x32504b4343474347ull;    // "GCGCCKP2"
constexpr uint64_t kMagicV1 = 0x31504b4343474347ull;  // "GCGCCKP1": format 1, without length or checksum
constexpr uint32_t kFormatVersion = 2;

// The fixed part of the file, before the state; the checksum covers these fields (but itself) and the
// state, so a flipped bit anywhere is caught before any state is used.
struct FileHeader {
  uint64_t magic = kMagic;
  uint32_t version = kFormatVersion;
  uint32_t reserved = 0;
  uint64_t step = 0, configFingerprint = 0;
  uint32_t worldSize = 0, rank = 0;
  uint64_t stateBytes = 0;
  std::array<uint8_t, 32> sha256{};
};
static_assert(sizeof(FileHeader) == 80);

std::array<uint8_t, 32> checksum(FileHeader h, const std::string& state) {
  h.sha256 = {};
  Sha256 sha;
  sha.update(std::as_bytes(std::span(&h, 1)));
  sha.update(state);
  return sha.digest();
}

}  // namespace

void writeCheckpoint(const std::string& path, const CheckpointHeader& h, const std::function<void(std::ostream&)>& body) {
  std::ostringstream state(std::ios::binary);
  body(state);
  const std::string bytes = state.str();
  FileHeader f;
  f.step = h.step;
  f.configFingerprint = h.configFingerprint;
  f.worldSize = h.worldSize;
  f.rank = h.rank;
  f.stateBytes = bytes.size();
  f.sha256 = checksum(f, bytes);

  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  GRADCOMP_CHECK_ARG(!ec, "cannot create the checkpoint directory of '", path, "': ", ec.message());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    GRADCOMP_CHECK_ARG(out.good(), "cannot write checkpoint '", tmp, "'");
    out.write(reinterpret_cast<const char*>(&f), sizeof f);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.write(reinterpret_cast<const char*>(&kMagic), sizeof kMagic);  // trailer: the file is complete
    out.flush();
    GRADCOMP_CHECK_ARG(out.good(), "writing checkpoint '", tmp, "' failed (disk full?)");
  }
  std::filesystem::rename(tmp, path, ec);
  GRADCOMP_CHECK_ARG(!ec, "cannot move checkpoint '", tmp, "' into place: ", ec.message());
}

CheckpointHeader readCheckpoint(const std::string& path, const std::function<void(const CheckpointHeader&)>& check,
                                const std::function<void(std::istream&)>& body) {
  std::ifstream in(path, std::ios::binary);
  GRADCOMP_CHECK_ARG(in.good(), "cannot open checkpoint '", path, "'");
  std::error_code ec;
  const auto fileBytes = std::filesystem::file_size(path, ec);
  GRADCOMP_CHECK_ARG(!ec, "cannot read the size of checkpoint '", path, "': ", ec.message());
  FileHeader f;
  GRADCOMP_CHECK_ARG(fileBytes >= sizeof(uint64_t) + sizeof(uint32_t), "'", path, "' is not a gradcomp checkpoint (",
                     fileBytes, " bytes)");
  in.read(reinterpret_cast<char*>(&f), static_cast<std::streamsize>(std::min<uint64_t>(fileBytes, sizeof f)));
  GRADCOMP_CHECK_ARG(f.magic != kMagicV1, "checkpoint '", path, "' has format version 1; this build reads version ",
                     kFormatVersion, " (it was written by an older gradcomp: rerun from the start)");
  GRADCOMP_CHECK_ARG(f.magic == kMagic, "'", path, "' is not a gradcomp checkpoint");
  GRADCOMP_CHECK_ARG(f.version == kFormatVersion, "checkpoint '", path, "' has format version ", f.version,
                     "; this build reads version ", kFormatVersion);
  GRADCOMP_CHECK_ARG(fileBytes >= sizeof f + sizeof kMagic && fileBytes - sizeof f - sizeof kMagic == f.stateBytes,
                     "checkpoint '", path, "' is truncated or has extra bytes: ", fileBytes, " bytes, its header says ",
                     sizeof f + f.stateBytes + sizeof kMagic);
  std::string state(f.stateBytes, '\0');
  in.read(state.data(), static_cast<std::streamsize>(state.size()));
  uint64_t trailer = 0;
  in.read(reinterpret_cast<char*>(&trailer), sizeof trailer);
  GRADCOMP_CHECK_ARG(in.good() && trailer == kMagic, "checkpoint '", path, "' is truncated (trailer missing)");
  GRADCOMP_CHECK_ARG(checksum(f, state) == f.sha256, "checkpoint '", path,
                     "' is corrupted: its SHA-256 checksum does not match its contents (refusing to resume from it)");
  const CheckpointHeader h{f.step, f.configFingerprint, f.worldSize, f.rank};
  check(h);
  std::istringstream stateIn(state, std::ios::binary);
  try {
    body(stateIn);
  } catch (const Error& e) {
    GRADCOMP_THROW(InvalidArgument, "checkpoint '", path, "': ", e.what());
  }
  GRADCOMP_CHECK_ARG(stateIn.peek() == std::char_traits<char>::eof(), "checkpoint '", path,
                     "' holds more state than this run reads (another model or configuration?)");
  return h;
}

void writeFloats(std::ostream& out, const std::vector<float>& v) {
  const uint64_t n = v.size();
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
}

void readFloats(std::istream& in, std::vector<float>& v, const char* what) {
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), sizeof n);
  GRADCOMP_CHECK_ARG(in.gcount() == sizeof n, what, ": truncated");
  GRADCOMP_CHECK_ARG(n == v.size(), what, ": ", n, " values stored, ", v.size(), " expected");
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  GRADCOMP_CHECK_ARG(static_cast<uint64_t>(in.gcount()) == n * sizeof(float), what, ": truncated");
}

uint64_t fingerprint(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace gradcomp
