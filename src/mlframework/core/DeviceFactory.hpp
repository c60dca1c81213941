#pragma once
// Private: where core's factories (core/Tensor.cpp) and FromDLPack get their tensors, so that
// core includes no backend.
//
// Each backend registers hooks for its device type when its library is loaded (from a static
// initialiser: the CPU backend inside libmlframework, the CUDA backend in libmlframework_cuda),
// so core calls a backend only through what it registered, a CPU-only program that links only
// libmlframework never loads CUDA, and one that asks for a device tensor without the backend's
// library gets a BackendError that says which library to link. Exported (not public API) for
// the component libraries.
#include <cstddef>
#include <memory>
#include <string>

#include <mlframework/core/Device.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/export.hpp>

namespace mlframework::detail {

/// What a backend registers for its device type.
struct DeviceTensorHooks {
  /// A zero-filled tensor on @p device.
  TensorPtr (*Make)(const Shape& shape, DataType dtype, Device device) = nullptr;
  /// A tensor over memory the caller owns on @p device (no copy); @p owner keeps it alive.
  TensorPtr (*Wrap)(void* data, const Shape& shape, DataType dtype, Device device,
                    std::shared_ptr<void> owner) = nullptr;
  /// The first element of @p tensor when it is this backend's tensor, else null.
  void* (*DataPointer)(const ITensor& tensor) = nullptr;
  /// The backend of this device type's tensors (null: the device type has none core calls).
  const TensorBackend& (*Backend)() noexcept = nullptr;
  /// What ToDLPack() keeps alive for the receiver, until its deleter runs: @p tensor itself
  /// (null hook), or a handle whose release orders the memory's reuse after the receiver's work
  /// (CUDA: the stream current at the export).
  TensorPtr (*Export)(const TensorPtr& tensor) = nullptr;
};

/// Registers @p hooks (static storage) for @p type, replacing any earlier ones (null unregisters).
MLFRAMEWORK_EXPORT void RegisterDeviceTensorHooks(DeviceType type, const DeviceTensorHooks* hooks) noexcept;

/// The hooks registered for @p device's type; BackendError naming the device and the library to
/// link when none are.
MLFRAMEWORK_EXPORT const DeviceTensorHooks& DeviceHooks(Device device);

/// A zero-filled tensor on @p device (not the CPU) from the registered hooks.
TensorPtr MakeDeviceTensor(const Shape& shape, DataType dtype, Device device);

/// The backend registered for @p device's type (Device::CPU(): the CPU backend, which also runs
/// host memory without a backend of its own); BackendError as DeviceHooks() when there is none.
const TensorBackend& BackendOf(Device device);

/// The checks every Wrap makes before it builds a tensor, so they fail alike: ArgumentError for a
/// `dtype` that is not a DataType, a `shape` whose byte size overflows, null `data` with elements,
/// or `data` not aligned to the element size (named @p data_name and @p shape_name). Returns the byte size.
MLFRAMEWORK_EXPORT std::size_t CheckWrapArguments(const void* data, const Shape& shape, DataType dtype,
                                                  const std::string& data_name = "data",
                                                  const std::string& shape_name = "shape");

}  // namespace mlframework::detail
