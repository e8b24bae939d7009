// CUDA twins of the bit-packed level codecs; see level_kernels.cuh.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/level_kernels.cuh"
#include "kernels/scalar/float_formats.h"

namespace gradcomp::cuda {
namespace {

using detail::addend;
using detail::kThreads;
constexpr int kWarpsPerBlock = kThreads / 32;

// One warp per codec block. Lane sums are sequential per lane (lane j takes elements j, j+L, j+2L, ...
// of the block, in order) and combined in the CPU's fixed tree: the same double, the same float.
__global__ void blockStatsKernel(LevelCodec codec, const float* g, const float* e, size_t n, size_t blockSize,
                                 size_t numBlocks, float* stats) {
  const size_t block = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (block >= numBlocks) return;  // whole warps leave together
  const unsigned lane = threadIdx.x & 31;
  const size_t b0 = block * blockSize, len = min(blockSize, n - b0);
  const float* gb = g + b0;
  const float* eb = e ? e + b0 : nullptr;
  if (codec == LevelCodec::TernGrad) {
    uint32_t m = 0;
    for (size_t i = lane; i < len; i += 32) m = max(m, scalar::absBits(addend(gb, eb, i)));
    m = __reduce_max_sync(0xffffffffu, m);
    if (lane == 0) stats[block] = scalar::bitsToFloat(m);
    return;
  }
  if (codec == LevelCodec::Qsgd) {
    double sum = 0;
    if (lane < 4)
      for (size_t i = lane; i < len; i += 4) {
        const double c = static_cast<double>(addend(gb, eb, i));
        sum = __dadd_rn(sum, __dmul_rn(c, c));  // the product of two floats is exact in double
      }
    const double l1 = __shfl_sync(0xffffffffu, sum, 1), l2 = __shfl_sync(0xffffffffu, sum, 2),
                 l3 = __shfl_sync(0xffffffffu, sum, 3);
    if (lane == 0) stats[block] = __double2float_rn(__dsqrt_rn(__dadd_rn(__dadd_rn(sum, l1), __dadd_rn(l2, l3))));
    return;
  }
  // sign: mean |c|; onebit: means of the c >= 0 and the c < 0 (8 lanes each).
  double pos = 0, neg = 0;
  unsigned numPos = 0;
  if (lane < 8)
    for (size_t i = lane; i < len; i += 8) {
      const float c = addend(gb, eb, i);
      if (codec == LevelCodec::Sign) {
        pos = __dadd_rn(pos, static_cast<double>(fabsf(c)));
      } else {
        const bool p = !(c < 0.0f);
        numPos += p;
        pos = __dadd_rn(pos, static_cast<double>(p ? c : 0.0f));
        neg = __dadd_rn(neg, static_cast<double>(p ? 0.0f : c));
      }
    }
  double lp[8], ln[8];
  for (int j = 0; j < 8; ++j) {
    lp[j] = __shfl_sync(0xffffffffu, pos, j);
    ln[j] = __shfl_sync(0xffffffffu, neg, j);
  }
  numPos = __reduce_add_sync(0xffffffffu, numPos);
  if (lane != 0) return;
  const double totalPos = __dadd_rn(__dadd_rn(__dadd_rn(lp[0], lp[1]), __dadd_rn(lp[2], lp[3])),
                                    __dadd_rn(__dadd_rn(lp[4], lp[5]), __dadd_rn(lp[6], lp[7])));
  if (codec == LevelCodec::Sign) {
    stats[block] = len ? __double2float_rn(__ddiv_rn(totalPos, static_cast<double>(len))) : 0.0f;
    return;
  }
  const double totalNeg = __dadd_rn(__dadd_rn(__dadd_rn(ln[0], ln[1]), __dadd_rn(ln[2], ln[3])),
                                    __dadd_rn(__dadd_rn(ln[4], ln[5]), __dadd_rn(ln[6], ln[7])));
  const size_t numNeg = len - numPos;
  stats[2 * block] = numPos ? __double2float_rn(__ddiv_rn(totalPos, static_cast<double>(numPos))) : 0.0f;
  stats[2 * block + 1] = numNeg ? __double2float_rn(__ddiv_rn(totalNeg, static_cast<double>(numNeg))) : 0.0f;
}

// The decoded value of a code, exactly as the CPU decoders compute it.
__device__ __forceinline__ float decodeLevel(LevelCodec codec, int bits, uint32_t code, const float* stats,
                                             size_t block) {
  switch (codec) {
    case LevelCodec::Qsgd: {
      const int s = (1 << (bits - 1)) - 1;
      const float unit = __fdiv_rn(stats[block], static_cast<float>(s));
      const float mag = __fmul_rn(static_cast<float>(code & ((1u << (bits - 1)) - 1u)), unit);
      return (code >> (bits - 1)) ? -mag : mag;
    }
    case LevelCodec::TernGrad:
      return code == 1 ? stats[block] : (code == 2 ? -stats[block] : 0.0f);
    case LevelCodec::Sign:
      return __fadd_rn(code ? stats[block] : -stats[block], 0.0f);
    default:
      return __fadd_rn(code ? stats[2 * block] : stats[2 * block + 1], 0.0f);
  }
}

__global__ void levelCodesKernel(LevelCodec codec, int bits, scalar::RngStream rng, const float* g, const float* e,
                                 size_t n, size_t blockSize, const float* stats, uint8_t* codes, float* residual,
                                 unsigned long long* firstBad) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float c = addend(g, e, i);
    if (!scalar::isFiniteBits(scalar::absBits(c))) detail::recordFirst(firstBad, i);
    const size_t block = i / blockSize;
    uint32_t code;
    switch (codec) {
      case LevelCodec::Qsgd: {
        const int s = (1 << (bits - 1)) - 1;
        const float norm = stats[block];
        const float toLevel = norm > 0.0f ? __fdiv_rn(static_cast<float>(s), norm) : 0.0f;
        float level = floorf(__fadd_rn(__fmul_rn(fabsf(c), toLevel), scalar::uniform01(rng.word(i))));
        level = level > static_cast<float>(s) ? static_cast<float>(s) : level;
        const uint32_t negative = signbit(c) && level > 0.0f;
        code = (negative << (bits - 1)) | static_cast<uint32_t>(level);
        break;
      }
      case LevelCodec::TernGrad: {
        const float maxAbs = stats[block];
        const float inv = maxAbs > 0.0f ? __fdiv_rn(1.0f, maxAbs) : 0.0f;
        const bool keep = scalar::uniform01(rng.word(i)) < __fmul_rn(fabsf(c), inv);
        code = keep ? (signbit(c) ? 2u : 1u) : 0u;
        break;
      }
      case LevelCodec::Sign:
        code = c > 0.0f || (c == 0.0f && (i & 1u) == 0);
        break;
      default:
        code = !(c < 0.0f);
        break;
    }
    codes[i] = static_cast<uint8_t>(code);
    if (residual) residual[i] = __fsub_rn(c, decodeLevel(codec, bits, code, stats, block));
  }
}

__global__ void packCodesKernel(const uint8_t* codes, size_t n, int bits, size_t numWords, uint32_t* packed) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t w = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < numWords; w += stride) {
    const uint64_t bit0 = 32 * static_cast<uint64_t>(w);
    const uint64_t firstElem = bit0 / bits;
    uint64_t endElem = (bit0 + 32 + bits - 1) / bits;
    if (endElem > n) endElem = n;
    uint32_t word = 0;
    for (uint64_t i = firstElem; i < endElem; ++i) {
      const int64_t shift = static_cast<int64_t>(i * bits) - static_cast<int64_t>(bit0);
      const uint32_t code = codes[i];
      word |= shift >= 0 ? code << shift : code >> -shift;
    }
    packed[w] = word;
  }
}

__global__ void decodeLevelsKernel(LevelCodec codec, int bits, const uint8_t* packed, size_t n, size_t blockSize,
                                   const float* stats, float* out, bool accumulate) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const uint32_t mask = (1u << bits) - 1u;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint64_t p = static_cast<uint64_t>(i) * bits;
    const unsigned shift = p & 7u;
    uint32_t raw = packed[p >> 3];
    if (shift + bits > 8) raw |= static_cast<uint32_t>(packed[(p >> 3) + 1]) << 8;  // straddles a byte
    const float v = decodeLevel(codec, bits, (raw >> shift) & mask, stats, i / blockSize);
    out[i] = accumulate ? __fadd_rn(out[i], v) : v;
  }
}

}  // namespace

cudaError_t launchLevelBlockStats(LevelCodec codec, const float* g, const float* e, size_t n, size_t blockSize,
                                  float* stats, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0) return cudaErrorInvalidValue;
  const size_t blocks = (n + blockSize - 1) / blockSize;
  const size_t grid = (blocks + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (grid > 0x7fffffffu) return cudaErrorInvalidValue;
  blockStatsKernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(codec, g, e, n, blockSize, blocks, stats);
  return cudaGetLastError();
}

cudaError_t launchLevelCodes(LevelCodec codec, int bits, scalar::RngStream rng, const float* g, const float* e,
                             size_t n, size_t blockSize, const float* stats, uint8_t* codes, float* residual,
                             unsigned long long* firstBad, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (blockSize == 0 || bits < 1 || bits > 8) return cudaErrorInvalidValue;
  levelCodesKernel<<<detail::gridFor(n), kThreads, 0, stream>>>(codec, bits, rng, g, e, n, blockSize, stats, codes,
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
  decodeLevelsKernel<<<detail::gridFor(n), kThreads, 0, stream>>>(codec, bits, packed, n, blockSize, stats, out,
                                                                   accumulate);
  return cudaGetLastError();
}

}  // namespace gradcomp::cuda
