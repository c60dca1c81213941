#pragma once
// Private: the CUDA backend's fused optimizer steps (TensorBackend::AdamStep / SGDStep) on lists
// of CUDA tensors; CudaBackend.cpp resolves the found-inf flag of a scale state and calls these.

#include <cstdint>

#include <mlframework/core/OptimizerStep.hpp>

namespace mlframework::backends::cuda {

/// Queues one Adam step over @p lists (FusedSteps.cpp has checked counts, sizes and dtypes), the
/// kernel skipping the step when the device int @p skip_flag (null: none) on GPU @p flag_device
/// is set; a step count in lists.StepCount is read by the step and moved on after it, on the
/// device, unless the flag is set. False when a tensor is not a CUDA tensor; ArgumentError when
/// the tensors or the flag lie on different GPUs. The host does not wait for the device.
bool QueueAdamStep(const OptimizerStepLists& lists, const AdamStepScalars& scalars, const std::int32_t* skip_flag,
                   int flag_device);
/// The SGD step, as QueueAdamStep().
bool QueueSGDStep(const OptimizerStepLists& lists, const SGDStepScalars& scalars, const std::int32_t* skip_flag,
                  int flag_device);

}  // namespace mlframework::backends::cuda
