#pragma once
// Private: unscale in place with the non-finite check fused (one read and one write pass).

#include <cstdint>

#include <cuda_runtime_api.h>

#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

/// `x = round(x * factor)` for every tensor of @p launch (slot 0); sets *flag when a written value is Inf or NaN.
void LaunchUnscale(const Launch& launch, FactorSource factor, std::int32_t* flag, cudaStream_t stream);
/// LaunchUnscale() that also raises *amax (a float in device memory) to the largest finite
/// |x * factor| (the FP32 product, before rounding into the dtype).
void LaunchUnscaleAmax(const Launch& launch, FactorSource factor, std::int32_t* flag, float* amax, cudaStream_t stream);

}  // namespace mlframework::backends::cuda
