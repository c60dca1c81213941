#pragma once
// Private: the FP8 recipes' fused scale update and amax fold on the device
// (TensorBackend::UpdateFloat8Scales / FoldFloat8Amax; the rules of core/Float8ScaleUpdate.hpp).

#include <cuda_runtime_api.h>

#include <mlframework/core/Float8ScaleUpdate.hpp>

namespace mlframework::backends::cuda {

/// Queues @p update on @p state (device memory laid out as Float8ScaleUpdate describes): one
/// block per slot rolls its history and reduces it, as Transformer Engine's kernel does.
void LaunchFloat8ScaleUpdate(float* state, const Float8ScaleUpdate& update, cudaStream_t stream);

/// Queues the fold of the scratch amax into row 0 for @p update's slots (one thread per slot).
void LaunchFloat8AmaxFold(float* state, const Float8ScaleUpdate& update, cudaStream_t stream);

}  // namespace mlframework::backends::cuda
