#include "compressors/registry.h"

#include "core/error.h"

namespace gradcomp {

// Factories live beside their codecs; adding a codec adds a declaration and a row here.
std::unique_ptr<Compressor> makeIdentityCodec(const CodecSpec&);
std::unique_ptr<Compressor> makeFp16Codec(const CodecSpec&);
std::unique_ptr<Compressor> makeBf16Codec(const CodecSpec&);
std::unique_ptr<Compressor> makeFp8E4M3Codec(const CodecSpec&);
std::unique_ptr<Compressor> makeFp8E5M2Codec(const CodecSpec&);
std::unique_ptr<Compressor> makeInt8Codec(const CodecSpec&);
std::unique_ptr<Compressor> makeQsgdCodec(const CodecSpec&);
std::unique_ptr<Compressor> makeTernGradCodec(const CodecSpec&);
std::unique_ptr<Compressor> makeTopKCodec(const CodecSpec&);
std::unique_ptr<Compressor> makeRandomKCodec(const CodecSpec&);
std::unique_ptr<Compressor> makeThresholdCodec(const CodecSpec&);
std::unique_ptr<Compressor> makeSignCodec(const CodecSpec&);
std::unique_ptr<Compressor> makeOneBitCodec(const CodecSpec&);

namespace {

struct Entry {
  const char* name;
  std::unique_ptr<Compressor> (*make)(const CodecSpec&);
};

constexpr Entry kRegistry[] = {
    {"none", makeIdentityCodec},   {"fp16", makeFp16Codec},          {"bf16", makeBf16Codec},
    {"fp8-e4m3", makeFp8E4M3Codec}, {"fp8-e5m2", makeFp8E5M2Codec},  {"int8", makeInt8Codec},
    {"qsgd", makeQsgdCodec},       {"terngrad", makeTernGradCodec},  {"topk", makeTopKCodec},
    {"randomk", makeRandomKCodec}, {"threshold", makeThresholdCodec}, {"sign", makeSignCodec},
    {"onebit", makeOneBitCodec},
};

}  // namespace

std::vector<std::string> codecNames() {
  std::vector<std::string> names;
  for (const auto& e : kRegistry) names.emplace_back(e.name);
  return names;
}

std::unique_ptr<Compressor> makeCompressor(const CodecSpec& spec) {
  for (const auto& e : kRegistry) {
    if (spec.name() != e.name) continue;
    auto c = e.make(spec);
    spec.checkAllUsed();
    c->canonical_ = spec.canonical();
    return c;
  }
  std::string known;
  for (const auto& e : kRegistry) known += (known.empty() ? "" : ", ") + std::string(e.name);
  GRADCOMP_THROW(InvalidArgument, "unknown codec '", spec.name(), "' (known: ", known, ")");
}

std::unique_ptr<Compressor> makeCompressor(const std::string& spec) { return makeCompressor(CodecSpec::parse(spec)); }

void decodeAnyWire(std::span<const std::byte> wire, std::span<float> out, DecodeMode mode) {
  const WireHeader h = parseHeader(wire);
  makeCompressor(codecIdName(h.codec))->decode(wire, out, mode);
}

}  // namespace gradcomp
