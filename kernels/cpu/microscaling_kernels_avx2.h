// AVX2 encoders and decoders of the block-scaled narrow formats (MXFP8, MXFP6, MXFP4, NVFP4), called by
// microscaling_kernels.cc on the avx2 path (and on the avx512 path for blocks that are a multiple of 8
// but not of 16) for whole blocks of a multiple of 8 values: each group of blocks' maxima, scales,
// element codes, saturation count and bit packing in registers, one pass over the input. Without them
// the portable loops write one code byte per value to a scratch array and pack it in a second pass, and
// at 16-32 values a block the compiler's vectorization of the element conversion stays partly scalar;
// the portable decoders unpack into a scratch array and look every code up in a table.
// Same bytes as the scalar steps of kernels/scalar/element_formats.h (pinned by the golden wire hashes
// and tests/kernels/block_kernel_paths_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/scalar/element_formats.h"

#if defined(__AVX2__)
#define GRADCOMP_CPU_AVX2_MICROSCALING 1
#else
#define GRADCOMP_CPU_AVX2_MICROSCALING 0
#endif

#if GRADCOMP_CPU_AVX2_MICROSCALING
namespace gradcomp::cpu::avx2 {

// What an encoder did: the saturations of the blocks it encoded, and how many values those blocks
// cover (the whole blocks; the caller encodes a short last block). On a NaN/Inf it stops, sets
// *firstBad (when given) and reports done = n, so the caller encodes nothing more.
struct BlocksEncoded {
  uint64_t saturated = 0;
  size_t done = 0;
};

// encodeMxBlocksPacked / encodeNvfp4BlocksPacked of microscaling_kernels.h for blockSize % 8 == 0.
BlocksEncoded encodeMxBlocksPacked(const float* x, size_t n, size_t blockSize, scalar::ElementFormat fmt,
                                   uint8_t* packed, uint8_t* scaleCodes, uint64_t* firstBad);
// blockMaxBits, when given (blockSize 16), holds each block's largest magnitude as nvfp4BlockMaxBits found it.
BlocksEncoded encodeNvfp4BlocksPacked(const float* x, size_t n, size_t blockSize, float t, uint8_t* packed,
                                      uint8_t* scaleCodes, uint64_t* firstBad, const uint32_t* blockMaxBits = nullptr);
// nvfp4BlockMaxBits of microscaling_kernels.h for 16-element blocks.
uint32_t nvfp4BlockMaxBits(const float* x, size_t n, uint32_t* maxBits);

// decodeMxBlocksPacked / decodeNvfp4BlocksPacked of microscaling_kernels.h for blockSize % 8 == 0, over
// the whole blocks: returns the values decoded (the caller decodes a short
// last block). The codes are those the payload check accepted (finite).
size_t decodeMxBlocksPacked(const uint8_t* packed, size_t n, size_t blockSize, scalar::ElementFormat fmt,
                            const uint8_t* scaleCodes, float* out, bool accumulate);
size_t decodeNvfp4BlocksPacked(const uint8_t* packed, size_t n, size_t blockSize, const uint8_t* scaleCodes, float t,
                               float* out, bool accumulate);

}  // namespace gradcomp::cpu::avx2
#endif
