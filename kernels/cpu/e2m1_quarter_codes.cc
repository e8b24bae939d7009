#include "kernels/cpu/e2m1_quarter_codes.h"

#include <array>

#include "kernels/scalar/element_formats.h"

namespace gradcomp::cpu {

const uint32_t* e2m1QuarterEntries() {
  // Static: the encoders are called per tile of about 1024 values, and 31 scalar conversions a call cost
  // as much as a tile's encode.
  static const auto entries = [] {
    const scalar::ElementSpec s = scalar::elementSpec(scalar::ElementFormat::E2M1);
    std::array<uint32_t, kE2M1Keys> e{};  // e[0] = 0: below 0.25, 0 included
    for (uint32_t k = 1; k < kE2M1Keys; ++k) {
      const uint32_t start = (k + kE2M1KeyBase) << 21;
      const uint8_t above = scalar::floatToElement(scalar::bitsToFloat(start + 1), s);
      const uint8_t at = scalar::floatToElement(scalar::bitsToFloat(start), s);
      e[k] = above | (at != above ? 8u : 0u);  // at an odd-upper edge, at == above - 1
    }
    return e;
  }();
  return entries.data();
}

}  // namespace gradcomp::cpu
