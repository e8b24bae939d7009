// The codec registry: every codec by name, built from a spec string ("topk:ratio=0.001,values=fp16").
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compressors/compressor.h"

namespace gradcomp {

// Throws InvalidArgument naming the unknown codec (and listing the known ones) or the bad parameter.
std::unique_ptr<Compressor> makeCompressor(const std::string& spec);
std::unique_ptr<Compressor> makeCompressor(const CodecSpec& spec);

// Every registered codec name, in registry order.
std::vector<std::string> codecNames();

// Decodes any gradcomp wire buffer with the codec its header names (the receiver needs no context).
void decodeAnyWire(std::span<const std::byte> wire, std::span<float> out, DecodeMode mode);

}  // namespace gradcomp
