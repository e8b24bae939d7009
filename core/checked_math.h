// Size arithmetic that cannot wrap: wire sizes come from untrusted headers, so every product and sum
// of sizes is checked before anything is allocated or written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace gradcomp {

inline std::optional<uint64_t> checkedMul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> checkedAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Rounds up to a multiple of `align` (a power of two); nullopt on overflow.
inline std::optional<uint64_t> checkedAlignUp(uint64_t v, uint64_t align) {
  auto s = checkedAdd(v, align - 1);
  if (!s) return std::nullopt;
  return *s & ~(align - 1);
}

constexpr uint64_t ceilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

}  // namespace gradcomp
