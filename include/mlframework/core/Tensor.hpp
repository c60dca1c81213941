#pragma once
/// @file Tensor.hpp
/// @brief Tensor factories: the way to make tensors on any device.

#include <vector>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Device.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// A tensor of @p shape on @p device holding @p values rounded into @p dtype.
/// Throws ArgumentError when `values.size()` differs from the element count of @p shape,
/// BackendError when the device's backend is unavailable.
MLFRAMEWORK_EXPORT TensorPtr FromVector(const std::vector<float>& values, Shape shape,
                                        DataType dtype = DataType::Float32, Device device = Device::CPU());
/// A tensor of zeros.
MLFRAMEWORK_EXPORT TensorPtr Zeros(Shape shape, DataType dtype = DataType::Float32, Device device = Device::CPU());
/// A scalar (shape `{}`) holding @p value rounded into @p dtype.
MLFRAMEWORK_EXPORT TensorPtr Scalar(float value, DataType dtype = DataType::Float32, Device device = Device::CPU());

}  // namespace mlframework
