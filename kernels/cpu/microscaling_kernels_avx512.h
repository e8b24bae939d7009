// AVX-512 encoders of the block-scaled narrow formats (microscaling_kernels_avx512.cc), called by
// microscaling_kernels.cc when cpu_path.h selects the avx512 path and the block is a multiple of 16:
// each block's maximum, scale, element codes, saturation count and bit packing in registers, one pass
// over the block. Same bytes as the scalar steps of kernels/scalar/element_formats.h (pinned by the
// golden wire hashes and tests/kernels/microscaling_kernel_paths_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/avx512_build.h"
#include "kernels/scalar/element_formats.h"

#if GRADCOMP_CPU_AVX512_KERNELS
namespace gradcomp::cpu::avx512 {

// encodeMxBlocksPacked / encodeNvfp4BlocksPacked of microscaling_kernels.h for blockSize % 16 == 0.
// With residual given (x finite), also residual[i] = x[i] - the packed decoder's value of element i.
uint64_t encodeMxBlocksPacked(const float* x, size_t n, size_t blockSize, scalar::ElementFormat fmt, uint8_t* packed,
                              uint8_t* scaleCodes, uint64_t* firstBad, float* residual = nullptr);
// blockMaxBits (16-element blocks, no residual): each block's largest magnitude, found beforehand.
uint64_t encodeNvfp4BlocksPacked(const float* x, size_t n, size_t blockSize, float t, uint8_t* packed,
                                 uint8_t* scaleCodes, uint64_t* firstBad, float* residual = nullptr,
                                 const uint32_t* blockMaxBits = nullptr);
// nvfp4BlockMaxBits of microscaling_kernels.h for 16-element blocks.
uint32_t nvfp4BlockMaxBits(const float* x, size_t n, uint32_t* maxBits);
// decodeMxBlocksPacked / decodeNvfp4BlocksPacked of microscaling_kernels.h for blockSize % 16 == 0.
void decodeMxBlocksPacked(const uint8_t* packed, size_t n, size_t blockSize, scalar::ElementFormat fmt,
                          const uint8_t* scaleCodes, float* out, bool accumulate);
void decodeNvfp4BlocksPacked(const uint8_t* packed, size_t n, size_t blockSize, const uint8_t* scaleCodes, float t,
                             float* out, bool accumulate);

}  // namespace gradcomp::cpu::avx512
#endif
