// CUDA twins of the cast codecs; see cast_kernels.cuh. Each thread owns 4 consecutive elements: with
// every pointer 16-byte aligned (8 for 2-byte codes) they move as one vector load / store per array,
// the loads the issue asks for; otherwise the same 4 elements go one by one. Both paths compute each
// element with the same scalar function, so alignment never changes a byte.
#include "kernels/cuda/cast_kernels.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/scalar/float_formats.h"

namespace gradcomp::cuda {
namespace {

using detail::kThreads;

struct Encoded {
  uint32_t code;   // fp32 bits, or the 16-bit code
  float decoded;   // what the receiver will decode (for the residual)
  bool saturated;
};

template <CastFormat F>
__device__ __forceinline__ Encoded encodeOne(float c, float prescale, float inversePrescale) {
  if constexpr (F == CastFormat::Fp32) {
    return {scalar::floatBits(c), c, false};
  } else if constexpr (F == CastFormat::Fp16) {
    const float v = __fmul_rn(c, prescale);
    const uint16_t h = scalar::floatToHalfBits(v);
    return {h, __fmul_rn(scalar::halfBitsToFloat(h), inversePrescale),
            scalar::absBits(v) >= scalar::kHalfOverflowFloatBits};
  } else {
    const uint16_t b = scalar::floatToBf16Bits(c);
    return {b, scalar::bf16BitsToFloat(b), scalar::bf16Overflows(c)};
  }
}

template <CastFormat F>
__device__ __forceinline__ float decodeOne(uint32_t code, float inversePrescale) {
  if constexpr (F == CastFormat::Fp32) return scalar::bitsToFloat(code);
  else if constexpr (F == CastFormat::Fp16) return __fmul_rn(scalar::halfBitsToFloat(static_cast<uint16_t>(code)), inversePrescale);
  else return scalar::bf16BitsToFloat(static_cast<uint16_t>(code));
}

template <CastFormat F>
__device__ __forceinline__ bool codeIsFinite(uint32_t code) {
  if constexpr (F == CastFormat::Fp32) return scalar::isFiniteBits(code & 0x7fffffffu);
  else if constexpr (F == CastFormat::Fp16) return scalar::halfIsFinite(static_cast<uint16_t>(code));
  else return scalar::bf16IsFinite(static_cast<uint16_t>(code));
}

template <CastFormat F>
using CodeT = std::conditional_t<F == CastFormat::Fp32, uint32_t, uint16_t>;

// Loads 4 codes starting at element i (vector when allowed).
template <CastFormat F>
__device__ __forceinline__ void loadCodes(const CodeT<F>* codes, size_t i, bool vec, uint32_t (&c)[4]) {
  if (vec) {
    if constexpr (F == CastFormat::Fp32) {
      const uint4 v = *reinterpret_cast<const uint4*>(codes + i);
      c[0] = v.x, c[1] = v.y, c[2] = v.z, c[3] = v.w;
    } else {
      const uint2 v = *reinterpret_cast<const uint2*>(codes + i);
      c[0] = v.x & 0xffffu, c[1] = v.x >> 16, c[2] = v.y & 0xffffu, c[3] = v.y >> 16;
    }
  } else {
    for (int j = 0; j < 4; ++j) c[j] = codes[i + j];
  }
}

template <CastFormat F>
__global__ void encodeCastKernel(const float* __restrict__ g, const float* e, size_t n, float prescale,
                                 float inversePrescale, CodeT<F>* __restrict__ codes, float* residual, bool vec,
                                 unsigned long long* saturated, unsigned long long* firstBad) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x * 4;
  unsigned satCount = 0;
  for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4; i < n; i += stride) {
    float c[4];
    const int m = n - i < 4 ? static_cast<int>(n - i) : 4;
    const bool v4 = vec && m == 4;
    if (v4) {
      detail::addend4(g, e, i, c);
    } else {
      for (int j = 0; j < m; ++j) c[j] = detail::addend(g, e, i + j);
    }
    uint32_t code[4] = {0, 0, 0, 0};
    float r[4] = {0, 0, 0, 0};
    for (int j = 0; j < m; ++j) {
      if (!scalar::isFiniteBits(scalar::absBits(c[j]))) detail::recordFirst(firstBad, i + j);
      const Encoded enc = encodeOne<F>(c[j], prescale, inversePrescale);
      code[j] = enc.code;
      r[j] = __fsub_rn(c[j], enc.decoded);
      satCount += enc.saturated;
    }
    if (v4) {
      if constexpr (F == CastFormat::Fp32) {
        *reinterpret_cast<uint4*>(codes + i) = make_uint4(code[0], code[1], code[2], code[3]);
      } else {
        *reinterpret_cast<uint2*>(codes + i) = make_uint2(code[0] | (code[1] << 16), code[2] | (code[3] << 16));
      }
      if (residual) *reinterpret_cast<float4*>(residual + i) = make_float4(r[0], r[1], r[2], r[3]);
    } else {
      for (int j = 0; j < m; ++j) {
        codes[i + j] = static_cast<CodeT<F>>(code[j]);
        if (residual) residual[i + j] = r[j];
      }
    }
  }
  if (saturated) {
    satCount = __reduce_add_sync(0xffffffffu, satCount);
    if ((threadIdx.x & 31) == 0 && satCount) atomicAdd(saturated, static_cast<unsigned long long>(satCount));
  }
}

template <CastFormat F>
__global__ void decodeCastKernel(const CodeT<F>* __restrict__ codes, size_t n, float inversePrescale,
                                 float* __restrict__ out, bool accumulate, bool vec) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x * 4;
  for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4; i < n; i += stride) {
    const int m = n - i < 4 ? static_cast<int>(n - i) : 4;
    if (vec && m == 4) {
      uint32_t c[4];
      loadCodes<F>(codes, i, true, c);
      float4 v = make_float4(decodeOne<F>(c[0], inversePrescale), decodeOne<F>(c[1], inversePrescale),
                             decodeOne<F>(c[2], inversePrescale), decodeOne<F>(c[3], inversePrescale));
      if (accumulate) {
        const float4 o = *reinterpret_cast<const float4*>(out + i);
        v = make_float4(__fadd_rn(o.x, v.x), __fadd_rn(o.y, v.y), __fadd_rn(o.z, v.z), __fadd_rn(o.w, v.w));
      }
      *reinterpret_cast<float4*>(out + i) = v;
    } else {
      for (int j = 0; j < m; ++j) {
        const float v = decodeOne<F>(codes[i + j], inversePrescale);
        out[i + j] = accumulate ? __fadd_rn(out[i + j], v) : v;
      }
    }
  }
}

template <CastFormat F>
__global__ void findNonFiniteCastKernel(const CodeT<F>* __restrict__ codes, size_t n, unsigned long long* firstBad) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    if (!codeIsFinite<F>(codes[i])) detail::recordFirst(firstBad, i);
}

bool aligned(const void* p, size_t bytes) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <CastFormat F>
cudaError_t encodeAs(const float* g, const float* e, size_t n, float prescale, void* codes, float* residual,
                     unsigned long long* saturated, unsigned long long* firstBad, cudaStream_t stream) {
  const size_t codeVec = F == CastFormat::Fp32 ? 16 : 8;
  const bool vec = aligned(g, 16) && aligned(e, 16) && aligned(residual, 16) && aligned(codes, codeVec);
  // fp32(1 / prescale): what the decoder computes from the header (Fp16Codec::decodeTile).
  const float inverse = 1.0f / prescale;
  encodeCastKernel<F><<<detail::gridFor((n + 3) / 4), kThreads, 0, stream>>>(
      g, e, n, prescale, inverse, static_cast<CodeT<F>*>(codes), residual, vec, saturated, firstBad);
  return cudaGetLastError();
}

template <CastFormat F>
cudaError_t decodeAs(const void* codes, size_t n, float inversePrescale, float* out, bool accumulate,
                     cudaStream_t stream) {
  const bool vec = aligned(out, 16) && aligned(codes, F == CastFormat::Fp32 ? 16 : 8);
  decodeCastKernel<F><<<detail::gridFor((n + 3) / 4), kThreads, 0, stream>>>(
      static_cast<const CodeT<F>*>(codes), n, inversePrescale, out, accumulate, vec);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launchEncodeCast(CastFormat fmt, const float* g, const float* e, size_t n, float prescale, void* codes,
                             float* residual, unsigned long long* saturated, unsigned long long* firstBad,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (fmt) {
    case CastFormat::Fp32: return encodeAs<CastFormat::Fp32>(g, e, n, 1.0f, codes, residual, saturated, firstBad, stream);
    case CastFormat::Fp16: return encodeAs<CastFormat::Fp16>(g, e, n, prescale, codes, residual, saturated, firstBad, stream);
    case CastFormat::Bf16: return encodeAs<CastFormat::Bf16>(g, e, n, 1.0f, codes, residual, saturated, firstBad, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launchDecodeCast(CastFormat fmt, const void* codes, size_t n, float inversePrescale, float* out,
                             bool accumulate, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (fmt) {
    case CastFormat::Fp32: return decodeAs<CastFormat::Fp32>(codes, n, 1.0f, out, accumulate, stream);
    case CastFormat::Fp16: return decodeAs<CastFormat::Fp16>(codes, n, inversePrescale, out, accumulate, stream);
    case CastFormat::Bf16: return decodeAs<CastFormat::Bf16>(codes, n, 1.0f, out, accumulate, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launchFindNonFiniteCast(CastFormat fmt, const void* codes, size_t n, unsigned long long* firstBad,
                                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const unsigned grid = detail::gridFor(n);
  switch (fmt) {
    case CastFormat::Fp32:
      findNonFiniteCastKernel<CastFormat::Fp32><<<grid, kThreads, 0, stream>>>(static_cast<const uint32_t*>(codes), n, firstBad);
      break;
    case CastFormat::Fp16:
      findNonFiniteCastKernel<CastFormat::Fp16><<<grid, kThreads, 0, stream>>>(static_cast<const uint16_t*>(codes), n, firstBad);
      break;
    case CastFormat::Bf16:
      findNonFiniteCastKernel<CastFormat::Bf16><<<grid, kThreads, 0, stream>>>(static_cast<const uint16_t*>(codes), n, firstBad);
      break;
  }
  return cudaGetLastError();
}

}  // namespace gradcomp::cuda
