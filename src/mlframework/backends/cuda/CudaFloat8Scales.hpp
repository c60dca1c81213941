#pragma once
// Private: the CUDA backend's FP8 scale-state steps (TensorBackend::UpdateFloat8Scales and
// FoldFloat8Amax) on a CUDA state tensor; CudaBackend.cpp's overrides call these.

#include <mlframework/core/Float8ScaleUpdate.hpp>
#include <mlframework/core/ITensor.hpp>

namespace mlframework::backends::cuda {

/// Queues the scale update (@p fold false) or the amax fold (@p fold true) of @p update on
/// @p state, an FP32 CUDA tensor; the host does not wait. ArgumentError for another tensor or a
/// state that does not fit @p update.
void QueueFloat8StateStep(ITensor& state, const Float8ScaleUpdate& update, bool fold);

}  // namespace mlframework::backends::cuda
