#include "mlframework/core/DeviceFactory.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include <mlframework/config.hpp>
#include <mlframework/core/Error.hpp>

namespace mlframework::detail {

namespace {

// One slot per device type; atomics because a backend library may be loaded (dlopen) while
// another thread makes tensors.
constexpr std::size_t kDeviceTypes = 2;

std::array<std::atomic<const DeviceTensorHooks*>, kDeviceTypes>& Registry() noexcept {
  static std::array<std::atomic<const DeviceTensorHooks*>, kDeviceTypes> hooks{};
  return hooks;
}

std::size_t Slot(DeviceType type) noexcept { return static_cast<std::size_t>(type); }

}  // namespace

void RegisterDeviceTensorHooks(DeviceType type, const DeviceTensorHooks* hooks) noexcept {
  if (Slot(type) < kDeviceTypes) {
    Registry()[Slot(type)].store(hooks, std::memory_order_release);
  }
}

const DeviceTensorHooks& DeviceHooks(Device device) {
  const DeviceTensorHooks* hooks =
      Slot(device.Type) < kDeviceTypes ? Registry()[Slot(device.Type)].load(std::memory_order_acquire) : nullptr;
  if (hooks != nullptr) {
    return *hooks;
  }
  if (device.IsCUDA() && MLFW_HAS_CUDA) {
    throw BackendError("cannot use " + device.ToString() +
                       ": the CUDA backend is not loaded (link mlframework::cuda, libmlframework_cuda)");
  }
  if (device.IsCUDA()) {
    throw BackendError("cannot use " + device.ToString() +
                       ": this build of mlframework has no CUDA backend (configure with nvcc available)");
  }
  throw BackendError("cannot use " + device.ToString() + ": no backend is registered for it");
}

TensorPtr MakeDeviceTensor(const Shape& shape, DataType dtype, Device device) {
  try {
    return DeviceHooks(device).Make(shape, dtype, device);
  } catch (const BackendError& error) {
    throw BackendError(std::string("cannot create a tensor: ") + error.what());
  }
}

const TensorBackend& BackendOf(Device device) {
  const DeviceTensorHooks& hooks = DeviceHooks(device);
  if (hooks.Backend == nullptr) {
    throw BackendError("cannot use " + device.ToString() + ": its backend registered no tensor backend");
  }
  return hooks.Backend();
}

std::size_t CheckWrapArguments(const void* data, const Shape& shape, DataType dtype, const std::string& data_name,
                               const std::string& shape_name) {
  if (!IsValid(dtype)) {
    throw ArgumentError("dtype", "value " + std::to_string(static_cast<int>(dtype)) + " is not a DataType");
  }
  const std::size_t element = ElementSize(dtype);
  std::size_t count = 1;
  for (const std::size_t extent : shape) {
    if (extent != 0 &&
        count > static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()) / element / extent) {
      throw ArgumentError(shape_name, ToString(shape) + " of " + std::string(ToString(dtype)) +
                                          " needs more bytes than the address space holds");
    }
    count *= extent;
  }
  if (count == 0) {
    return 0;
  }
  if (data == nullptr) {
    throw ArgumentError(data_name,
                        "is null but shape " + ToString(shape) + " has " + std::to_string(count) + " elements");
  }
  const auto address = reinterpret_cast<std::uintptr_t>(data);
  if (address % element != 0) {
    std::ostringstream text;
    text << "address " << data << " is not aligned to the " << element << "-byte elements of " << ToString(dtype);
    throw ArgumentError(data_name, text.str());
  }
  return count * element;
}

}  // namespace mlframework::detail
