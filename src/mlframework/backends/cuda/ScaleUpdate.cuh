#pragma once
// Private: the device-side dynamic-scale update (one thread, no host synchronisation).

#include <cuda_runtime_api.h>

#include <mlframework/core/ScalePolicy.hpp>

#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

/// block->state advances by UpdateScaleState(state, policy, found_inf != 0);
/// block->last_skipped records the overflow, block->found_inf is cleared.
void LaunchScaleUpdate(DeviceScaleBlock* block, const ScalePolicy& policy, cudaStream_t stream);

/// *out = block->found_inf != 0 ? 1.0f : 0.0f (one thread), for an all-reduce of the flag.
void LaunchFlagToFloat(const DeviceScaleBlock* block, float* out, cudaStream_t stream);

/// block->found_inf = *in != 0.0f (one thread): the reduced flag written back.
void LaunchFlagFromFloat(DeviceScaleBlock* block, const float* in, cudaStream_t stream);

}  // namespace mlframework::backends::cuda
