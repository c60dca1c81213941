#pragma once
// Private: where core's factories (core/Tensor.cpp) get their tensors, so that core includes
// no backend.
//
// Host tensors come from HostBackend(), which the CPU backend (part of libmlframework) defines.
// Core knows no device backend. A backend library registers a factory for its device type when
// it is loaded (libmlframework_cuda does, from a static initialiser), so a CPU-only program that
// links only libmlframework never loads CUDA, and one that asks for a device tensor without the
// backend's library gets a BackendError that says which library to link.
#include <mlframework/core/Device.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/export.hpp>

namespace mlframework::detail {

/// The backend of host tensors (Device::CPU()): it allocates them and makes views of them.
const TensorBackend& HostBackend() noexcept;

/// Makes a zero-filled tensor on a device of the type it was registered for.
using DeviceTensorFactory = TensorPtr (*)(const Shape& shape, DataType dtype, Device device);

/// Registers @p factory for @p type, replacing any earlier one (null unregisters). Thread-safe.
MLFRAMEWORK_EXPORT void RegisterDeviceTensorFactory(DeviceType type, DeviceTensorFactory factory) noexcept;

/// A zero-filled tensor on @p device (not the CPU) from the registered factory; BackendError
/// naming the device and the library to link when none is registered.
TensorPtr MakeDeviceTensor(const Shape& shape, DataType dtype, Device device);

}  // namespace mlframework::detail
