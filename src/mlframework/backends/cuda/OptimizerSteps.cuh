#pragma once
// Private: the fused optimizer steps on the GPU (TensorBackend::AdamStep / SGDStep). One launch
// per list: block b updates elements [b * kOptimizerChunk, (b + 1) * kOptimizerChunk) of the
// virtual array of the list's tensors, found by binary search over the entries' offsets. Every
// block first reads the found-inf flag (when given) and returns at once when it is set, so a
// skipped step costs one small read per block and the host never waits for the flag. A step
// count kept on the device is read by the step and moved on by a one-thread kernel after it,
// under the same flag, so the host never needs to know whether the device skipped.

#include <cstdint>

#include <cuda_runtime_api.h>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/OptimizerStep.hpp>

namespace mlframework::backends::cuda {

/// One non-empty tensor of a fused step, as the kernels read it from device memory.
struct OptimizerEntry {
  float* parameter;
  const float* gradient;
  float* first;                       // exp_avg / momentum buffer; null for SGD without momentum
  float* second;                      // exp_avg_sq; null for SGD
  void* low_precision;                // null, or the FP16/BF16 copy of the updated parameter
  std::uint64_t offset;               // first element of this tensor in the virtual array
  std::uint32_t low_precision_dtype;  // DataType of low_precision
  std::uint32_t padding;
};

/// Elements one block updates.
inline constexpr std::uint64_t kOptimizerChunk = 4096;

/// Queues the Adam step over @p count entries at @p entries (device memory, followed by one
/// sentinel entry whose offset is the total element count @p total). @p skip_flag: null, or a
/// device int that, when non-zero at the kernel's start, turns the step into nothing.
/// @p step_count: null, or the device float of the steps taken so far: the step is then step
/// `*step_count + 1`, its bias corrections computed on the device from scalars.BiasCorrection
/// (the kernel only reads the count: LaunchAdvanceStepCount() moves it on).
void LaunchAdamStep(const OptimizerEntry* entries, std::int32_t count, std::uint64_t total,
                    const AdamStepScalars& scalars, const std::int32_t* skip_flag, const float* step_count,
                    cudaStream_t stream);
/// The SGD step over the same kind of table; with @p step_count, the first step is the one
/// that finds the count at 0.
void LaunchSGDStep(const OptimizerEntry* entries, std::int32_t count, std::uint64_t total,
                   const SGDStepScalars& scalars, const std::int32_t* skip_flag, const float* step_count,
                   cudaStream_t stream);
/// Adds 1 to the device float @p step_count unless the device int @p skip_flag (null: none) is
/// set: queued after a step that read the count, so that only a step taken is counted.
void LaunchAdvanceStepCount(float* step_count, const std::int32_t* skip_flag, cudaStream_t stream);

}  // namespace mlframework::backends::cuda
