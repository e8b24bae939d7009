// Block-scaled narrow formats (kernels/scalar/element_formats.h): OCP Microscaling (MXFP8 / MXFP6 /
// MXFP4: blocks sharing one E8M0 power-of-two scale) and NVFP4 (E2M1 elements, an E4M3 scale per block
// and an fp32 scale per tensor). Codes are written one byte each (low `bits` bits used); the codec packs
// them. The scalar steps are the shared __host__ __device__ ones, so the CUDA twin emits the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/scalar/element_formats.h"

namespace gradcomp::cpu {

// Consecutive blocks of x (the last may be short): one E8M0 scale code per block in scaleCodes[], one
// element code per value; returns the saturations (|x / X| at or past the format's overflow midpoint).
// A block maximum at or past Inf means NaN/Inf in the block: *firstBad (when given) is set to the first
// such index and the encode stops (the codes are then unspecified).
uint64_t encodeMxBlocks(const float* x, size_t n, size_t blockSize, scalar::ElementFormat fmt, uint8_t* codes,
                        uint8_t* scaleCodes, uint64_t* firstBad = nullptr);
// encodeMxBlocks with the codes packed LSB-first (fmt's 8, 6 or 4 bits each) into `packed`, which starts
// on a byte (n elements from a multiple of 4); AVX-512 where cpu_path.h selects it and blockSize is a
// multiple of 16, else, for blockSize a multiple of 8, the AVX2 kernels of
// microscaling_kernels_avx2.h over the whole blocks, else encodeMxBlocks and packBits. The same bytes
// every way.
uint64_t encodeMxBlocksPacked(const float* x, size_t n, size_t blockSize, scalar::ElementFormat fmt, uint8_t* packed,
                              uint8_t* scaleCodes, uint64_t* firstBad = nullptr);
// out[i] (=|+=) element(codes[i]) x 2^(scaleCode - 127), for one block.
void decodeMxBlock(const uint8_t* codes, size_t n, scalar::ElementFormat fmt, uint8_t scaleCode, float* out,
                   bool accumulate);

// NVFP4 with the tensor's decode scale t (scalar::nvfp4TensorScale of the tensor's amax): 4-bit E2M1
// codes and one E4M3 scale code per block; returns the saturations.
uint64_t encodeNvfp4Blocks(const float* x, size_t n, size_t blockSize, float t, uint8_t* codes, uint8_t* scaleCodes,
                           uint64_t* firstBad = nullptr);
// encodeNvfp4Blocks with the 4-bit codes packed LSB-first, as encodeMxBlocksPacked. blockMaxBits, when
// given, holds each block's largest magnitude as nvfp4BlockMaxBits found it (the tensor's first pass, for
// its amax), which the paths where nvfp4EncodeUsesBlockMaxima read instead of finding it again; the
// bytes are the same either way.
uint64_t encodeNvfp4BlocksPacked(const float* x, size_t n, size_t blockSize, float t, uint8_t* packed,
                                 uint8_t* scaleCodes, uint64_t* firstBad = nullptr,
                                 const uint32_t* blockMaxBits = nullptr);
// Whether encodeNvfp4BlocksPacked on the active path (cpu_path.h) reads blockMaxBits: AVX-512 or AVX2
// with 16-element blocks. Elsewhere keeping them would cost a store for nothing.
bool nvfp4EncodeUsesBlockMaxima(size_t blockSize);
// maxBits[b] = the largest magnitude (fp32 bits) of block b of x (the last may be short), found by the
// same pass that returns the largest of them all (>= Inf's bits when x holds NaN or Inf): NVFP4's pass
// for the tensor scale, in about the time of absMax on AVX-512 and AVX2 (the reductions hide under its
// memory stalls on the Xeon; on Zen 4 once the lines are asked for into L2 far ahead).
uint32_t nvfp4BlockMaxBits(const float* x, size_t n, size_t blockSize, uint32_t* maxBits);
void decodeNvfp4Block(const uint8_t* codes, size_t n, uint8_t scaleCode, float t, float* out, bool accumulate);

// encodeMxBlocksPacked / encodeNvfp4BlocksPacked of finite x that also write error feedback's residual[i] =
// x[i] - (the packed decoder's value of element i), bit for bit; on AVX-512 from the codes in registers,
// elsewhere by a decode and a subtraction.
uint64_t encodeMxBlocksPackedWithResidual(const float* x, size_t n, size_t blockSize, scalar::ElementFormat fmt,
                                          uint8_t* packed, uint8_t* scaleCodes, float* residual);
uint64_t encodeNvfp4BlocksPackedWithResidual(const float* x, size_t n, size_t blockSize, float t, uint8_t* packed,
                                             uint8_t* scaleCodes, float* residual);

// The decoders' entry points on packed codes (as encodeMxBlocksPacked / encodeNvfp4BlocksPacked wrote
// them, n elements from a byte) and one scale code per block: out (=|+=) element x the block's factor,
// for payloads the validators accepted. AVX-512 where selected and blockSize % 16 == 0, else AVX2 for
// blockSize % 8 == 0 (microscaling_kernels_avx2.h), else unpacked and decoded
// block by block; the same values every way.
void decodeMxBlocksPacked(const uint8_t* packed, size_t n, size_t blockSize, scalar::ElementFormat fmt,
                          const uint8_t* scaleCodes, float* out, bool accumulate);
void decodeNvfp4BlocksPacked(const uint8_t* packed, size_t n, size_t blockSize, const uint8_t* scaleCodes, float t,
                             float* out, bool accumulate);

// max |x| (exact: an integer max of the magnitude bits); >= Inf when x holds Inf or NaN.
float absMax(const float* x, size_t n);
// max |g + e| with the sum rounded as fp32 (the fused error-feedback input), without storing it.
float absMaxOfSum(const float* g, const float* e, size_t n);

}  // namespace gradcomp::cpu
