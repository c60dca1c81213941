#pragma once
// Private: the CUDA backend object (fused multi-tensor kernels and device-resident scaling).

#include <mlframework/core/DeviceScaling.hpp>

// The backend class derives from the FP8 entry points' class (kept in their own files).
#include "mlframework/backends/cuda/CudaFloat8Backend.hpp"

namespace mlframework::backends::cuda {

/// The one CUDA backend object (what CudaTensor::Backend() returns).
const DeviceScalingBackend& BackendInstance() noexcept;

}  // namespace mlframework::backends::cuda
