#include "training/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace gradcomp {

namespace {
constexpr uint64_t kMagic = 0x31504b4343474347ull;  // "GCGCCKP1"
}

void writeCheckpoint(const std::string& path, const CheckpointHeader& h, const std::function<void(std::ostream&)>& body) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    GRADCOMP_CHECK_ARG(out.good(), "cannot write checkpoint '", tmp, "'");
    const uint64_t fields[] = {kMagic, h.step, h.configFingerprint, h.worldSize, h.rank};
    out.write(reinterpret_cast<const char*>(fields), sizeof fields);
    body(out);
    out.write(reinterpret_cast<const char*>(&kMagic), sizeof kMagic);  // trailer: the file is complete
    out.flush();
    GRADCOMP_CHECK_ARG(out.good(), "writing checkpoint '", tmp, "' failed");
  }
  std::filesystem::rename(tmp, path);
}

CheckpointHeader readCheckpoint(const std::string& path, const std::function<void(const CheckpointHeader&)>& check,
                                const std::function<void(std::istream&)>& body) {
  std::ifstream in(path, std::ios::binary);
  GRADCOMP_CHECK_ARG(in.good(), "cannot open checkpoint '", path, "'");
  in.exceptions(std::ios::goodbit);
  uint64_t fields[5] = {};
  in.read(reinterpret_cast<char*>(fields), sizeof fields);
  GRADCOMP_CHECK_ARG(in.gcount() == sizeof fields && fields[0] == kMagic, "'", path, "' is not a gradcomp checkpoint");
  CheckpointHeader h{fields[1], fields[2], static_cast<uint32_t>(fields[3]), static_cast<uint32_t>(fields[4])};
  check(h);
  try {
    body(in);
  } catch (const Error& e) {
    GRADCOMP_THROW(InvalidArgument, "checkpoint '", path, "': ", e.what());
  }
  uint64_t trailer = 0;
  in.read(reinterpret_cast<char*>(&trailer), sizeof trailer);
  GRADCOMP_CHECK_ARG(in.gcount() == sizeof trailer && trailer == kMagic, "checkpoint '", path,
                     "' is truncated or has extra state (trailer missing)");
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
