// libFuzzer target for the decoders: any bytes in, either a DecodeError or a valid decode, never a
// crash, hang or out-of-bounds access -- and an accepted payload decodes to finite values only (the
// oracle: a decoder that accepts a finite scale whose use overflows is a bug, and the target traps).
// Built as a fuzzer with -DGRADCOMP_FUZZ=ON (clang), and linked into the unit tests, which replay the
// seed corpus and the regression files through it.
//
// Each input is decoded twice: as given, and with its header checksum recomputed. Random mutations of a
// header almost never keep the checksum valid, so without the second pass the fuzzer would only ever
// explore parseHeader; re-signed, a mutated field reaches the codec's own header and payload checks.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "compressors/registry.h"
#include "core/error.h"

namespace {

void decodeAndCheck(std::span<const std::byte> wire) {
  using namespace gradcomp;
  WireHeader h;
  try {
    h = parseHeader(wire);
  } catch (const DecodeError&) {
    return;
  }
  // Decoding needs an output of the announced size; cap it so the fuzzer explores, not allocates.
  if (h.numElements > (uint64_t{1} << 22)) return;
  std::vector<float> out(h.numElements, 1.0f);
  try {
    decodeAnyWire(wire, out, DecodeMode::Accumulate);
    decodeAnyWire(wire, out, DecodeMode::Overwrite);
  } catch (const DecodeError&) {
    return;
  }
  for (float v : out)
    if (!std::isfinite(v)) __builtin_trap();  // accepted, yet decodes to Inf/NaN
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradcomp;
  const std::span<const std::byte> wire(reinterpret_cast<const std::byte*>(data), size);
  decodeAndCheck(wire);
  if (size >= kWireHeaderBytes) {
    std::vector<std::byte> signed_(wire.begin(), wire.end());
    WireHeader h;
    std::memcpy(&h, signed_.data(), sizeof h);
    h.checksum = headerChecksum(h);
    std::memcpy(signed_.data(), &h, sizeof h);
    decodeAndCheck(signed_);
  }
  return 0;
}
