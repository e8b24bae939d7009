// libFuzzer target for the decoders: any bytes in, either a DecodeError or a valid decode, never a
// crash, hang or out-of-bounds access. Built as a fuzzer with -DGRADCOMP_FUZZ=ON (clang), and linked
// into the unit tests, which replay the seed corpus (real encoder outputs) through it.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "compressors/registry.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradcomp;
  const std::span<const std::byte> wire(reinterpret_cast<const std::byte*>(data), size);
  WireHeader h;
  try {
    h = parseHeader(wire);
  } catch (const DecodeError&) {
    return 0;
  }
  // Decoding needs an output of the announced size; cap it so the fuzzer explores, not allocates.
  if (h.numElements > (uint64_t{1} << 22)) return 0;
  std::vector<float> out(h.numElements, 1.0f);
  try {
    decodeAnyWire(wire, out, DecodeMode::Accumulate);
    decodeAnyWire(wire, out, DecodeMode::Overwrite);
  } catch (const DecodeError&) {
  }
  return 0;
}
