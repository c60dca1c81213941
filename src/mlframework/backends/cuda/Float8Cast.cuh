#pragma once
// Private: the FP8 kernels of core/Float8Cast.hpp over a staged launch. Entry s of the launch's
// table is tensor `index_base + s` of the call's list, whose per-tensor values (scale,
// scale_inv, amax) sit at that index of their FP32 device arrays.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

/// Raises the bits of `amax[index_base + s]` (zeroed before) to the largest |x| of tensor s
/// (slot 0); NaN propagates (its magnitude bits exceed infinity's).
void LaunchFloat8Amax(const Launch& launch, std::uint32_t index_base, float* amax, cudaStream_t stream);

/// `dst = saturate_to_fp8(src * scale[index_base + s])` (slot 0 FP32/FP16/BF16 into slot 1
/// E4M3FN/E5M2, cuda_fp8.h's __NV_SATFINITE conversion, NaN keeping its sign) and, when @p amax
/// is not null, raises `amax[index_base + s]` to the largest |src| as LaunchFloat8Amax() does.
void LaunchScaledCastToFloat8(const Launch& launch, std::uint32_t index_base, const float* scale, float* amax,
                              cudaStream_t stream);

/// `dst = round_to_dst(float(src) * scale_inv[index_base + s])` (slot 0 E4M3FN/E5M2 into slot 1
/// FP32/FP16/BF16).
void LaunchDequantizeFloat8(const Launch& launch, std::uint32_t index_base, const float* scale_inv,
                            cudaStream_t stream);

}  // namespace mlframework::backends::cuda
