#pragma once
// Private: casts between FP32, FP16 and BF16 with a fused scale and non-finite check.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

/// `dst = round_to_dst(src * factor)` (slot 0 to slot 1 of @p launch); when @p flag is not null,
/// sets *flag when a written value is Inf or NaN.
void LaunchCast(const Launch& launch, FactorSource factor, std::int32_t* flag, cudaStream_t stream);
/// LaunchCast() that also raises *amax (device memory) to the largest finite |src * factor|.
void LaunchCastAmax(const Launch& launch, FactorSource factor, std::int32_t* flag, float* amax, cudaStream_t stream);

}  // namespace mlframework::backends::cuda
