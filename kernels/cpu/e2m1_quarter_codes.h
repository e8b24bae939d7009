// E2M1 codes by quarter binade, for the NVFP4 group encoders that code products standing in for
// quotients (microscaling_kernels_avx512.cc, microscaling_kernels_avx2.cc). E2M1's seven rounding edges
// (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5) have at most two mantissa bits, so a nonnegative finite
// magnitude's code is fixed by its exponent and top two mantissa bits (its key: 1 + the index of its
// quarter binade from 0.25 up, 0 below, clamped at kE2M1Keys - 1, where every code is 6's), except at an
// edge itself, the start of its quarter, where round-to-nearest-even picks the even neighbour.
#pragma once

#include <cstdint>

namespace gradcomp::cpu {

// key = (bits >> 21) - kE2M1KeyBase, floored at 0 and capped at kE2M1Keys - 1: key 1 starts at 0.25
// (bits 0x3e800000).
constexpr uint32_t kE2M1KeyBase = (0x3e800000u >> 21) - 1;
constexpr uint32_t kE2M1Keys = 32;

// kE2M1Keys entries, computed once from the scalar rule (so they cannot drift from it): each the code just
// above its quarter's start, with bit 3 set where the start is an edge whose upper neighbour is odd (0.25,
// 1.25, 2.5, 5: there the code is one less). Compiled for the baseline ISA: it is called from code of
// every path.
const uint32_t* e2m1QuarterEntries();

}  // namespace gradcomp::cpu
