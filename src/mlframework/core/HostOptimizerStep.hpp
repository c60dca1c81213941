#pragma once
// Private: the fused optimizer steps over host memory (Adam/AdamW, SGD; core/OptimizerStep.hpp
// gives their scalars). Declared in core and defined by the CPU backend, which is part of
// libmlframework (as HostBackend() in DeviceFactory.hpp), so the optimizers reach the host
// kernels without including a backend.

#include <cstddef>
#include <span>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/OptimizerStep.hpp>

namespace mlframework::detail {

/// One tensor of a fused step: FP32 elements of the parameter, its gradient and its state.
struct HostOptimizerTensor {
  float* parameter = nullptr;
  const float* gradient = nullptr;
  float* first = nullptr;         // Adam's exp_avg, SGD's momentum buffer (null: SGD without momentum)
  float* second = nullptr;        // Adam's exp_avg_sq
  void* low_precision = nullptr;  // null, or the FP16/BF16 copy of the updated parameter
  DataType low_precision_dtype = DataType::BFloat16;
  std::size_t count = 0;
};

/// The fused steps over @p tensors (FP32, host memory; the caller has checked them).
void HostAdamStep(std::span<const HostOptimizerTensor> tensors, const AdamStepScalars& scalars);
void HostSGDStep(std::span<const HostOptimizerTensor> tensors, const SGDStepScalars& scalars);

}  // namespace mlframework::detail
