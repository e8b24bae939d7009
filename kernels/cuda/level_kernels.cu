// CUDA twins of the bit-packed level codecs; see level_kernels.cuh.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/level_kernels.cuh"
#include "kernels/scalar/level_codes.h"

namespace gradcomp::cuda {
namespace {

using detail::kThreads;
constexpr int kWarpsPerBlock = kThreads / 32;

// One warp per codec block: lane j computes scalar::laneSum*(j) (the CPU's lane j, in its order), and
// lane 0 combines the lanes in the CPU's tree.
__global__ void blockStatsKernel(LevelCodec codec, int bits, const float* g, const float* e, size_t n, size_t blockSize,
                                 size_t numBlocks, float* stats) {
  const size_t block = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (block >= numBlocks) return;  // whole warps leave together
  const unsigned lane = threadIdx.x & 31;
  const size_t b0 = block * blockSize, len = min(blockSize, n - b0);
  const float* gb = g + b0;
  const float* eb = e ? e + b0 : nullptr;
  if (codec == LevelCodec::TernGrad) {  // max |c|: an integer max of the bits, order-free
    uint32_t m = 0;
    for (size_t i = lane; i < len; i += 32) m = max(m, scalar::absBits(scalar::addend(gb, eb, i)));
    m = __reduce_max_sync(0xffffffffu, m);
    if (lane == 0) stats[block] = scalar::bitsToFloat(m);
    return;
  }
  if (codec == LevelCodec::Qsgd) {
    const double sum = lane < 4 ? scalar::laneSumSquares(gb, eb, len, lane) : 0.0;
    const double l1 = __shfl_sync(0xffffffffu, sum, 1), l2 = __shfl_sync(0xffffffffu, sum, 2),
                 l3 = __shfl_sync(0xffffffffu, sum, 3);
    if (lane == 0) stats[block] = scalar::l2NormOfLanes(sum, l1, l2, l3, scalar::qsgdLevels(bits));
    return;
  }
  double pos = 0, neg = 0;
  unsigned numPos = 0;
  if (lane < 8) {
    if (codec == LevelCodec::Sign) {
      pos = scalar::laneSumAbs(gb, eb, len, lane);
    } else {
      const scalar::OneBitLane l = scalar::laneOneBit(gb, eb, len, lane);
      pos = l.positive;
      neg = l.negative;
      numPos = static_cast<unsigned>(l.numPositive);
    }
  }
  double lp[8], ln[8];
  for (int j = 0; j < 8; ++j) {
    lp[j] = __shfl_sync(0xffffffffu, pos, j);
    ln[j] = __shfl_sync(0xffffffffu, neg, j);
  }
  numPos = __reduce_add_sync(0xffffffffu, numPos);
  if (lane != 0) return;
  if (codec == LevelCodec::Sign) {
    stats[block] = scalar::meanOf(scalar::sumOfLanes8(lp), len);
    return;
  }
  stats[2 * block] = scalar::meanOf(scalar::sumOfLanes8(lp), numPos);
  stats[2 * block + 1] = scalar::meanOf(scalar::sumOfLanes8(ln), len - numPos);
}

// The decoded value of a code, exactly as the CPU decoders compute it.
__device__ __forceinline__ float decodeLevel(LevelCodec codec, int bits, uint32_t code, const float* stats,
                                             size_t block) {
  switch (codec) {
    case LevelCodec::Qsgd: return scalar::qsgdValue(code, stats[block], bits);
    case LevelCodec::TernGrad: return scalar::ternValue(code, stats[block]);
    case LevelCodec::Sign: return scalar::twoValued(code, stats[block], -stats[block]);
    default: return scalar::twoValued(code, stats[2 * block], stats[2 * block + 1]);
  }
}

// Codes and decoding: one warp per codec block too (the block's statistic is read once per block, no
// 64-bit division per element); lane l takes the block's elements l, l+32, ...
__global__ void levelCodesKernel(LevelCodec codec, int bits, scalar::RngStream rng, const float* g, const float* e,
                                 size_t n, size_t blockSize, const float* stats, uint8_t* codes, float* residual,
                                 unsigned long long* firstBad) {
  const size_t block = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const size_t b0 = block * blockSize;
  if (b0 >= n) return;
  const size_t end = min(n, b0 + blockSize);
  for (size_t i = b0 + (threadIdx.x & 31); i < end; i += 32) {
    const float c = scalar::addend(g, e, i);
    if (!scalar::isFiniteBits(scalar::absBits(c))) detail::recordFirst(firstBad, i);
    uint32_t code;
    switch (codec) {
      case LevelCodec::Qsgd: code = scalar::qsgdCode(c, stats[block], bits, scalar::roundingUniform(rng, i)); break;
      case LevelCodec::TernGrad: code = scalar::ternCode(c, stats[block], scalar::roundingUniform(rng, i)); break;
      case LevelCodec::Sign: code = scalar::signCode(c, i); break;
      default: code = scalar::oneBitCode(c); break;
    }
    codes[i] = static_cast<uint8_t>(code);
    if (residual) residual[i] = __fsub_rn(c, decodeLevel(codec, bits, code, stats, block));
  }
}

__global__ void packCodesKernel(const uint8_t* codes, size_t n, int bits, size_t numWords, uint32_t* packed) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t w = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < numWords; w += stride)
    packed[w] = scalar::packedWord(codes, n, bits, w);
}

__global__ void decodeLevelsKernel(LevelCodec codec, int bits, const uint8_t* packed, size_t n, size_t blockSize,
                                   const float* stats, float* out, bool accumulate) {
  const size_t block = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const size_t b0 = block * blockSize;
  if (b0 >= n) return;
  const size_t end = min(n, b0 + blockSize);
  for (size_t i = b0 + (threadIdx.x & 31); i < end; i += 32) {
    const float v = decodeLevel(codec, bits, scalar::unpackedCode(packed, i, bits), stats, block);
    out[i] = accumulate ? __fadd_rn(out[i], v) : v;
  }
}


}  // namespace

cudaError_t launchLevelBlockStats(LevelCodec codec, int bits, const float* g, const float* e, size_t n, size_t blockSize,
                                  float* stats, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  const size_t blocks = (n + blockSize - 1) / blockSize;
  const size_t grid = (blocks + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (grid > 0x7fffffffu) return cudaErrorInvalidValue;
  blockStatsKernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(codec, bits, g, e, n, blockSize, blocks, stats);
  return cudaGetLastError();
}

cudaError_t launchLevelCodes(LevelCodec codec, int bits, scalar::RngStream rng, const float* g, const float* e,
                             size_t n, size_t blockSize, const float* stats, uint8_t* codes, float* residual,
                             unsigned long long* firstBad, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0 || bits < 1 || bits > 8) return cudaErrorInvalidValue;
  levelCodesKernel<<<detail::warpPerBlockGrid(n, blockSize), kThreads, 0, stream>>>(codec, bits, rng, g, e, n, blockSize, stats, codes,
                                                                 residual, firstBad);
  return cudaGetLastError();
}

cudaError_t launchPackCodes(const uint8_t* codes, size_t n, int bits, uint32_t* packed, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (bits < 1 || bits > 8) return cudaErrorInvalidValue;
  const size_t words = (static_cast<uint64_t>(n) * bits + 31) / 32;
  packCodesKernel<<<detail::gridFor(words), kThreads, 0, stream>>>(codes, n, bits, words, packed);
  return cudaGetLastError();
}

cudaError_t launchDecodeLevels(LevelCodec codec, int bits, const uint8_t* packed, size_t n, size_t blockSize,
                               const float* stats, float* out, bool accumulate, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0 || bits < 1 || bits > 8) return cudaErrorInvalidValue;
  decodeLevelsKernel<<<detail::warpPerBlockGrid(n, blockSize), kThreads, 0, stream>>>(codec, bits, packed, n, blockSize, stats, out,
                                                                   accumulate);
  return cudaGetLastError();
}

}  // namespace gradcomp::cuda
