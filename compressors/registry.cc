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
std::unique_ptr<Compressor> makeMxFp8Codec(const CodecSpec&);
std::unique_ptr<Compressor> makeMxFp6Codec(const CodecSpec&);
std::unique_ptr<Compressor> makeMxFp4Codec(const CodecSpec&);
std::unique_ptr<Compressor> makeNvfp4Codec(const CodecSpec&);
std::unique_ptr<Compressor> makeInt4Codec(const CodecSpec&);

namespace {

struct Entry {
  const char* name;
  CodecId id;  // the number its wire headers carry (wire_format.h)
  std::unique_ptr<Compressor> (*make)(const CodecSpec&);
};

constexpr Entry kRegistry[] = {
    {"none", CodecId::None, makeIdentityCodec},
    {"fp16", CodecId::Fp16, makeFp16Codec},
    {"bf16", CodecId::Bf16, makeBf16Codec},
    {"fp8-e4m3", CodecId::Fp8E4M3, makeFp8E4M3Codec},
    {"fp8-e5m2", CodecId::Fp8E5M2, makeFp8E5M2Codec},
    {"int8", CodecId::Int8, makeInt8Codec},
    {"qsgd", CodecId::Qsgd, makeQsgdCodec},
    {"terngrad", CodecId::TernGrad, makeTernGradCodec},
    {"topk", CodecId::TopK, makeTopKCodec},
    {"randomk", CodecId::RandomK, makeRandomKCodec},
    {"threshold", CodecId::Threshold, makeThresholdCodec},
    {"sign", CodecId::Sign, makeSignCodec},
    {"onebit", CodecId::OneBit, makeOneBitCodec},
    {"mxfp8", CodecId::MxFp8, makeMxFp8Codec},
    {"mxfp6", CodecId::MxFp6, makeMxFp6Codec},
    {"mxfp4", CodecId::MxFp4, makeMxFp4Codec},
    {"nvfp4", CodecId::NvFp4, makeNvfp4Codec},
    {"int4", CodecId::Int4, makeInt4Codec},
};

}  // namespace

const char* codecIdName(uint16_t id) {
  for (const auto& e : kRegistry)
    if (static_cast<uint16_t>(e.id) == id) return e.name;
  return "unknown";
}

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
