#pragma once
// Private: where core's factories (core/Tensor.cpp) get their tensors, so that core includes
// no backend. The backends define these functions: the CPU backend HostBackend(); builds with
// CUDA MakeDeviceTensor() in the CUDA backend, other builds to raise a clear BackendError
// (NoDeviceFactory.cpp).

#include <mlframework/core/Device.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/TensorBackend.hpp>

namespace mlframework::detail {

/// The backend of host tensors (Device::CPU()): it allocates them and makes views of them.
const TensorBackend& HostBackend() noexcept;

/// A zero-filled tensor on @p device (not the CPU); BackendError when unavailable.
TensorPtr MakeDeviceTensor(const Shape& shape, DataType dtype, Device device);

}  // namespace mlframework::detail
