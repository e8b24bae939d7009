// Launchers of the CUDA twins of the cast codecs: `none` (fp32), `fp16` (with pre-scale) and `bf16`
// (kernels/cpu/cast_kernels.h). Same bytes as the CPU reference: both are built on the shared scalar
// conversions (kernels/scalar/float_formats.h). All pointers are device pointers, any alignment:
// 16-byte aligned inputs take 4-element vector loads and stores, others the scalar path, same bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace gradcomp::cuda {

enum class CastFormat { Fp32, Fp16, Bf16 };

// codes[i] = cast(c[i] * prescale) with c = g + e (e may be null: c = g). prescale applies to fp16 only
// (1 for the others). residual (may be null, may alias e): c - decode(code), the fused error-feedback
// update. saturated (device counter, may be null) counts finite values clamped to the range; firstBad
// (device, may be null) receives the smallest index whose c is NaN/Inf.
cudaError_t launchEncodeCast(CastFormat fmt, const float* g, const float* e, size_t n, float prescale, void* codes,
                             float* residual, unsigned long long* saturated, unsigned long long* firstBad,
                             cudaStream_t stream);
// out[i] (=|+=) decode(codes[i]) * inversePrescale (fp16; 1 for the others).
cudaError_t launchDecodeCast(CastFormat fmt, const void* codes, size_t n, float inversePrescale, float* out,
                             bool accumulate, cudaStream_t stream);
// firstBad receives the smallest index whose code is Inf/NaN (a decoder's validation pass).
cudaError_t launchFindNonFiniteCast(CastFormat fmt, const void* codes, size_t n, unsigned long long* firstBad,
                                    cudaStream_t stream);

}  // namespace gradcomp::cuda
