// The digit layout of the radix select over |x| bits (kernels/cuda/sparse_kernels.cu), shared with a
// host emulation that checks it against cpu::radixSelect (tests/kernels/radix_digits_test.cc).
//
// Keys are the bits of |x| (bit 31 always 0), taken in three digits from the top: bits 30..20 (11),
// 19..9 (11), 8..0 (9). Pass p histograms digit p over the keys whose higher digits equal the prefix
// chosen so far, then picks the digit holding the k-th largest key.
#pragma once

#include "kernels/scalar/host_device.h"

namespace gradcomp::scalar {

inline constexpr int kRadixPasses = 3;
inline constexpr int kRadixBins = 2048;  // 2^11, the widest digit

GRADCOMP_HD constexpr int radixShift(int pass) { return pass == 0 ? 20 : (pass == 1 ? 9 : 0); }
GRADCOMP_HD constexpr int radixBits(int pass) { return pass == 2 ? 9 : 11; }

GRADCOMP_HD uint32_t radixDigit(uint32_t key, int pass) {
  return (key >> radixShift(pass)) & ((1u << radixBits(pass)) - 1u);
}

// Whether key's digits above pass `pass` equal the prefix's (always true in pass 0).
GRADCOMP_HD bool radixMatches(uint32_t key, uint32_t prefix, int pass) {
  const int high = radixShift(pass) + radixBits(pass);
  return (key >> high) == (prefix >> high);
}

// The choice for one digit d, scanning from the largest: `above` keys lie in larger digits, `count`
// in d. d holds the k-th largest when above < k <= above + count; then the prefix gains d and
// k - above keys are still to be taken at or below it.
GRADCOMP_HD bool radixDigitHoldsK(unsigned long long above, unsigned long long count, unsigned long long k) {
  return above < k && k <= above + count;
}

}  // namespace gradcomp::scalar
