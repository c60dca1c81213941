#pragma once
/// @file mlframework.hpp
/// @brief Umbrella header: everything a training loop needs.

#include <mlframework/config.hpp>

#include <mlframework/core/BFloat16.hpp>
#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Device.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float16.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/core/TensorBackend.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>

// amp
#include <mlframework/amp/ScalePolicy.hpp>

// optimizers

// optimizers::mixed_precision
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>
#include <mlframework/optimizers/mixed_precision/MixedPrecisionOptions.hpp>
#include <mlframework/optimizers/mixed_precision/PrecisionManager.hpp>

// distributed and distributed::fsdp
