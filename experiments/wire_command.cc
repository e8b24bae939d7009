#include "experiments/wire_command.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "compressors/registry.h"
#include "core/error.h"

namespace gradcomp {
namespace {

std::vector<std::byte> readFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  GRADCOMP_CHECK_ARG(in.good(), "cannot open ", what, " '", path, "'");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(bytes.size());
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<float> readFloats(const std::string& path, const char* what) {
  const auto bytes = readFile(path, what);
  GRADCOMP_CHECK_ARG(bytes.size() % sizeof(float) == 0, what, " '", path, "' has ", bytes.size(),
                     " bytes, not a whole number of float32 values");
  std::vector<float> v(bytes.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

void writeFile(const std::string& path, const void* data, size_t bytes, const char* what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  GRADCOMP_CHECK_ARG(out.good(), "cannot write ", what, " '", path, "'");
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  GRADCOMP_CHECK_ARG(out.good(), "writing ", what, " '", path, "' failed");
}

// A 16-byte aligned buffer: what the codecs require of a wire buffer.
struct AlignedBytes {
  explicit AlignedBytes(size_t n) : storage(n + kWireAlign) {
    auto p = reinterpret_cast<uintptr_t>(storage.data());
    data = reinterpret_cast<std::byte*>((p + kWireAlign - 1) & ~uintptr_t(kWireAlign - 1));
    size = n;
  }
  std::span<std::byte> span() { return {data, size}; }
  std::vector<std::byte> storage;
  std::byte* data;
  size_t size;
};

}  // namespace

void runEncodeCommand(const EncodeCommandOptions& o, std::ostream& out) {
  GRADCOMP_CHECK_ARG(o.residualIn.empty() == o.residualOut.empty(),
                     "encode: --residual-in and --residual-out go together");
  const auto codec = makeCompressor(o.codec);
  const std::vector<float> x = readFloats(o.input, "input");
  EncodeContext ctx;
  ctx.seed = o.seed;
  ctx.rank = o.rank;
  ctx.step = o.step;
  ctx.tensorId = o.tensorId;
  AlignedBytes wire(codec->maxEncodedBytes(x.size(), ctx));
  EncodeResult r;
  if (o.residualIn.empty()) {
    r = codec->encode(x, wire.span(), ctx);
  } else {
    const std::vector<float> residual = readFloats(o.residualIn, "residual");
    GRADCOMP_CHECK_ARG(residual.size() == x.size(), "encode: the residual has ", residual.size(),
                       " values, the input ", x.size());
    std::vector<float> next(x.size());
    r = codec->encodeWithResidual(x, residual, next, wire.span(), ctx);
    writeFile(o.residualOut, next.data(), next.size() * sizeof(float), "residual");
  }
  writeFile(o.output, wire.data, r.wireBytes, "wire buffer");
  out << "encoded " << x.size() << " values with " << codec->canonicalSpec() << " into " << r.wireBytes
      << " bytes\n";
}

void runDecodeCommand(const DecodeCommandOptions& o, std::ostream& out) {
  const std::vector<std::byte> bytes = readFile(o.input, "wire buffer");
  AlignedBytes wire(bytes.size());
  if (!bytes.empty()) std::memcpy(wire.data, bytes.data(), bytes.size());
  const WireHeader h = parseHeader(wire.span());
  std::vector<float> values(h.numElements);
  decodeAnyWire(wire.span(), values, DecodeMode::Overwrite);
  writeFile(o.output, values.data(), values.size() * sizeof(float), "output");
  out << "decoded " << values.size() << " values (" << codecIdName(h.codec) << ")\n";
}

}  // namespace gradcomp
