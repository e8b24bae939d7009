#include "kernels/cpu/sign_kernels.h"

#include "kernels/cpu/block_scale_kernels.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/scalar/host_device.h"

#include <cmath>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#define GRADCOMP_HAVE_AVX2 1
#endif

namespace gradcomp::cpu {

using scalar::floatBits;

void writeBits(const uint8_t* flags, size_t n, size_t bitOffset, uint8_t* bits) {
  size_t i = 0;
  // Leading partial byte (blocks that are not multiples of 8 start mid-byte).
  for (; i < n && ((bitOffset + i) & 7u); ++i) {
    const size_t b = bitOffset + i;
    bits[b >> 3] = static_cast<uint8_t>((bits[b >> 3] & ~(1u << (b & 7))) | (flags[i] << (b & 7)));
  }
  for (; i + 8 <= n; i += 8) {
    uint32_t byte = 0;
    for (int j = 0; j < 8; ++j) byte |= static_cast<uint32_t>(flags[i + j]) << j;
    bits[(bitOffset + i) >> 3] = static_cast<uint8_t>(byte);
  }
  for (; i < n; ++i) {
    const size_t b = bitOffset + i;
    bits[b >> 3] = static_cast<uint8_t>((bits[b >> 3] & ~(1u << (b & 7))) | (flags[i] << (b & 7)));
  }
}

namespace {

// Sums in double over 8 interleaved lanes (lane j takes elements i with i % 8 == j, in order),
// combined as ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)): a fixed order that the AVX2 and scalar paths
// both follow exactly (and a CUDA twin can). Two 4-lane accumulators keep the add chains short.
struct LaneSums {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  double total() const {
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  }
};

thread_local std::vector<uint8_t> tFlags;

uint8_t* flagsScratch(size_t n) {
  if (tFlags.size() < n) tFlags.resize(n);
  return tFlags.data();
}

#ifdef GRADCOMP_HAVE_AVX2
// Adds 8 floats to the 8 double lanes: elements i..i+3 to lanes 0-3, i+4..i+7 to lanes 4-7.
struct LaneAcc {
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  void add(__m256 v) {
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  void store(LaneSums& s) const {
    _mm256_storeu_pd(s.lane, lo);
    _mm256_storeu_pd(s.lane + 4, hi);
  }
};

// 8 lane masks from one byte of bits (lane j <- bit j).
inline __m256 bitsToMask(uint8_t byte) {
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(byte), bit), bit));
}
#endif

// Decodes n elements: bit 1 -> one, bit 0 -> zero (each + 0.0f so -0 becomes +0).
void decodeTwoValued(const uint8_t* bits, size_t bitOffset, size_t n, float one, float zero, float* out,
                     bool accumulate) {
  size_t i = 0;
#ifdef GRADCOMP_HAVE_AVX2
  if (bitOffset == 0) {
    const __m256 vOne = _mm256_set1_ps(one + 0.0f), vZero = _mm256_set1_ps(zero + 0.0f);
    for (; i + 8 <= n; i += 8) {
      __m256 v = _mm256_blendv_ps(vZero, vOne, bitsToMask(bits[i >> 3]));
      if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
      _mm256_storeu_ps(out + i, v);
    }
  }
#endif
  for (; i < n; ++i) {
    const size_t b = bitOffset + i;
    const float v = (((bits[b >> 3] >> (b & 7)) & 1u) ? one : zero) + 0.0f;
    out[i] = accumulate ? out[i] + v : v;
  }
}

}  // namespace

float encodeSignBlock(const float* x, size_t n, uint64_t first, uint8_t* bits) {
  LaneSums sum;
  size_t i = 0;
#ifdef GRADCOMP_HAVE_AVX2
  if ((first & 7u) == 0) {
    // Byte-aligned block starting at an even index: zeros at even positions are bits 0, 2, 4, 6.
    const __m256 zero = _mm256_setzero_ps(), absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    LaneAcc acc;
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      const int gt = _mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_GT_OQ));
      const int eq = _mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_EQ_OQ));
      bits[i >> 3] = static_cast<uint8_t>(gt | (eq & 0x55));
      acc.add(_mm256_and_ps(v, absMask));
    }
    acc.store(sum);
  }
#endif
  if (i < n) {
    uint8_t* f = flagsScratch(n - i);
    for (size_t j = i; j < n; ++j) {
      const uint8_t evenZero = x[j] == 0.0f && (((first + j) & 1u) == 0);
      f[j - i] = static_cast<uint8_t>((x[j] > 0.0f) | evenZero);
      sum.lane[j & 7] += std::fabs(x[j]);
    }
    writeBits(f, n - i, (first + i) & 7u, bits + (((first & 7u) + i) >> 3));
  }
  return n ? static_cast<float>(sum.total() / static_cast<double>(n)) : 0.0f;
}

void encodeSignBlocks(const float* x, size_t n, size_t blockSize, uint64_t first, uint8_t* bits, float* scales,
                      uint32_t* maxAbsBits) {
  size_t b0 = 0, block = 0;
  uint32_t largest = 0;
#ifdef GRADCOMP_HAVE_AVX2
  // One block's sums are two chains of dependent double adds (lanes 0-3 and 4-7, in the element order
  // that fixes the bytes), so a lone block runs at the adds' latency, about half a cycle per element;
  // four blocks' chains interleaved run at their throughput. Each block's lanes, order and bits are
  // encodeSignBlock's, so the scales are bit for bit the same.
  constexpr size_t kBlocks = 4;
  if ((first & 7u) == 0 && blockSize % 8 == 0) {
    const __m256 zero = _mm256_setzero_ps(), absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256i maxBits = _mm256_setzero_si256();
    for (; b0 + kBlocks * blockSize <= n; b0 += kBlocks * blockSize, block += kBlocks) {
      LaneAcc acc[kBlocks];
      for (size_t i = 0; i < blockSize; i += 8) {
        for (size_t k = 0; k < kBlocks; ++k) {
          const size_t at = b0 + k * blockSize + i;
          // This is the tile's one read from memory (the codec checks finiteness through `largest`):
          // the same line of the next four blocks is asked for, 4 x blockSize ahead.
          if (i % 16 == 0) prefetchFloats(x, at + kBlocks * blockSize, at + kBlocks * blockSize + 1, PrefetchInto::L1);
          const __m256 v = _mm256_loadu_ps(x + at);
          const int gt = _mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_GT_OQ));
          const int eq = _mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_EQ_OQ));
          bits[at >> 3] = static_cast<uint8_t>(gt | (eq & 0x55));
          const __m256 magnitude = _mm256_and_ps(v, absMask);
          maxBits = _mm256_max_epu32(maxBits, _mm256_castps_si256(magnitude));
          acc[k].add(magnitude);
        }
      }
      for (size_t k = 0; k < kBlocks; ++k) {
        LaneSums sum;
        acc[k].store(sum);
        scales[block + k] = static_cast<float>(sum.total() / static_cast<double>(blockSize));
      }
    }
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), maxBits);
    for (const uint32_t l : lanes) largest = l > largest ? l : largest;
  }
#endif
  if (maxAbsBits && b0 < n) {
    const float rest = blockAmax(x + b0, n - b0);
    largest = floatBits(rest) > largest ? floatBits(rest) : largest;
  }
  for (; b0 < n; b0 += blockSize, ++block) {
    const size_t len = blockSize < n - b0 ? blockSize : n - b0;
    scales[block] = encodeSignBlock(x + b0, len, first + b0, bits + (((first & 7u) + b0) >> 3));
  }
  if (maxAbsBits) *maxAbsBits = largest;
}

void decodeSignBlock(const uint8_t* bits, size_t bitOffset, size_t n, float scale, float* out, bool accumulate) {
  decodeTwoValued(bits, bitOffset, n, scale, -scale, out, accumulate);
}

OneBitMeans encodeOneBitBlock(const float* x, size_t n, size_t bitOffset, uint8_t* bits) {
  LaneSums pos, neg;
  size_t numPos = 0, i = 0;
#ifdef GRADCOMP_HAVE_AVX2
  if (bitOffset == 0) {
    const __m256 zero = _mm256_setzero_ps();
    LaneAcc accPos, accNeg;
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      const __m256 isPos = _mm256_cmp_ps(v, zero, _CMP_GE_OQ);
      const int m = _mm256_movemask_ps(isPos);
      bits[i >> 3] = static_cast<uint8_t>(m);
      numPos += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(m)));
      accPos.add(_mm256_and_ps(v, isPos));
      accNeg.add(_mm256_andnot_ps(isPos, v));
    }
    accPos.store(pos);
    accNeg.store(neg);
  }
#endif
  if (i < n) {
    uint8_t* f = flagsScratch(n - i);
    for (size_t j = i; j < n; ++j) {
      const bool p = !(x[j] < 0.0f);
      f[j - i] = p;
      numPos += p;
      pos.lane[j & 7] += p ? x[j] : 0.0f;
      neg.lane[j & 7] += p ? 0.0f : x[j];
    }
    writeBits(f, n - i, (bitOffset + i) & 7u, bits + ((bitOffset + i) >> 3));
  }
  const size_t numNeg = n - numPos;
  return OneBitMeans{numPos ? static_cast<float>(pos.total() / static_cast<double>(numPos)) : 0.0f,
                     numNeg ? static_cast<float>(neg.total() / static_cast<double>(numNeg)) : 0.0f};
}

void decodeOneBitBlock(const uint8_t* bits, size_t bitOffset, size_t n, OneBitMeans means, float* out,
                       bool accumulate) {
  decodeTwoValued(bits, bitOffset, n, means.positive, means.negative, out, accumulate);
}

}  // namespace gradcomp::cpu
