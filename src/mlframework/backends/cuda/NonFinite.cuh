#pragma once
// Private: the non-finite check alone (one read pass).

#include <cstdint>

#include <cuda_runtime_api.h>

#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

/// Sets *flag when any element of the tensors of @p launch (slot 0) is Inf or NaN.
void LaunchNonFinite(const Launch& launch, std::int32_t* flag, cudaStream_t stream);
/// LaunchNonFinite() that also raises *amax (device memory) to the largest finite |x|.
void LaunchNonFiniteAmax(const Launch& launch, std::int32_t* flag, float* amax, cudaStream_t stream);

}  // namespace mlframework::backends::cuda
