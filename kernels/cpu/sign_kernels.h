// 1-bit codecs. Bits are LSB-first, one per element (element i of a byte-aligned tile in bit i % 8).
//
// sign (scaled sign, EF-signSGD, Karimireddy et al. 2019): bit = x > 0; the block scale is mean(|x|),
// summed in double over 8 interleaved lanes in a fixed order (sign_kernels.cc), as are onebit's means.
// sign(0) is not +1 (that biases every zero upward, DeepSpeed #7769's family of bugs): a zero's bit is
// 1 at even and 0 at odd global indices, so zeros decode to +-scale in equal numbers.
//
// onebit (1-bit SGD, Seide et al. 2014): bit = x >= 0; the block stores the mean of its non-negative
// and the mean of its negative elements, and each element decodes to the mean of its group.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradcomp::cpu {

// `first` is the global index of x[0]; bits points at the byte holding it. Returns mean(|x|).
float encodeSignBlock(const float* x, size_t n, uint64_t first, uint8_t* bits);
// Consecutive blocks of x (the last may be short), each as encodeSignBlock (same bits, same scale, bit for
// bit) with its scale in scales[b]: x[0] is global element `first`, bits points at the byte holding it.
// With maxAbsBits given, the largest |x| as fp32 bits goes there (at or above 0x7f800000: x holds a
// NaN/Inf, and the output is not to be used).
void encodeSignBlocks(const float* x, size_t n, size_t blockSize, uint64_t first, uint8_t* bits, float* scales,
                      uint32_t* maxAbsBits = nullptr);
// Decodes n elements whose first bit is bit `bitOffset` of bits[0].
void decodeSignBlock(const uint8_t* bits, size_t bitOffset, size_t n, float scale, float* out, bool accumulate);

struct OneBitMeans {
  float positive;  // mean of x >= 0 (0 when none)
  float negative;  // mean of x < 0 (0 when none)
};
OneBitMeans encodeOneBitBlock(const float* x, size_t n, size_t bitOffset, uint8_t* bits);
void decodeOneBitBlock(const uint8_t* bits, size_t bitOffset, size_t n, OneBitMeans means, float* out, bool accumulate);

// Sets bits [bitOffset, bitOffset+n) of `bits` from flags (0/1); the other bits of touched bytes are kept.
void writeBits(const uint8_t* flags, size_t n, size_t bitOffset, uint8_t* bits);

}  // namespace gradcomp::cpu
