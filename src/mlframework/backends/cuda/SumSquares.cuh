#pragma once
// Private: sum of squares with the non-finite check fused (one read pass),
// deterministic: FP32 partial per block, then one block combines the partials
// in FP64 in a fixed order.

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

/// Stage 1: partials[b] = FP32 sum of squares of block b's chunk; sets *flag on Inf or NaN.
void LaunchSumSquares(const Launch& launch, float* partials, std::int32_t* flag, cudaStream_t stream);
/// Stage 2: result->sum = (sum of partials[0, count) in FP64, fixed order) * factor * factor.
void LaunchSumSquaresFinalize(const float* partials, std::size_t count, double factor, DeviceResult* result,
                              cudaStream_t stream);

}  // namespace mlframework::backends::cuda
