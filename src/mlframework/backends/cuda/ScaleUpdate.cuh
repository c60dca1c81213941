#pragma once
// Private: the device-side dynamic-scale update (one thread, no host synchronisation).

#include <cuda_runtime_api.h>

#include <mlframework/core/ScalePolicy.hpp>

#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

/// block->state advances by UpdateScaleState(state, policy, found_inf != 0);
/// block->last_skipped records the overflow, block->found_inf is cleared.
void LaunchScaleUpdate(DeviceScaleBlock* block, const ScalePolicy& policy, cudaStream_t stream);

/// out[0] = block->found_inf != 0 ? 1.0f : 0.0f (one thread), for an all-reduce of the flag;
/// out[1] = block->amax too when @p with_amax (one MAX all-reduce agrees both).
void LaunchFlagToFloat(const DeviceScaleBlock* block, float* out, bool with_amax, cudaStream_t stream);

/// block->found_inf = in[0] != 0.0f (one thread): the reduced flag written back; block->amax =
/// in[1] when @p with_amax.
void LaunchFlagFromFloat(DeviceScaleBlock* block, const float* in, bool with_amax, cudaStream_t stream);

}  // namespace mlframework::backends::cuda
