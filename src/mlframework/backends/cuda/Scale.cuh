#pragma once
// Private: scale in place (one read and one write pass, no check).

#include <cuda_runtime_api.h>

#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

/// `x = round(x * factor)` for every tensor of @p launch (slot 0).
void LaunchScale(const Launch& launch, FactorSource factor, cudaStream_t stream);

}  // namespace mlframework::backends::cuda
