#include "mlframework/core/DeviceFactory.hpp"

#include <array>
#include <atomic>
#include <string>

#include <mlframework/config.hpp>
#include <mlframework/core/Error.hpp>

namespace mlframework::detail {

namespace {

// One slot per device type; atomics because a backend library may be loaded (dlopen) while
// another thread makes tensors.
std::array<std::atomic<DeviceTensorFactory>, 2>& Factories() noexcept {
  static std::array<std::atomic<DeviceTensorFactory>, 2> factories{};
  return factories;
}

std::size_t Slot(DeviceType type) noexcept { return static_cast<std::size_t>(type); }

}  // namespace

void RegisterDeviceTensorFactory(DeviceType type, DeviceTensorFactory factory) noexcept {
  if (Slot(type) < Factories().size()) {
    Factories()[Slot(type)].store(factory, std::memory_order_release);
  }
}

TensorPtr MakeDeviceTensor(const Shape& shape, DataType dtype, Device device) {
  const DeviceTensorFactory factory =
      Slot(device.Type) < Factories().size() ? Factories()[Slot(device.Type)].load(std::memory_order_acquire) : nullptr;
  if (factory != nullptr) {
    return factory(shape, dtype, device);
  }
  if (device.IsCUDA() && MLFW_HAS_CUDA) {
    throw BackendError("cannot create a tensor on " + device.ToString() +
                       ": the CUDA backend is not loaded (link mlframework::cuda, libmlframework_cuda)");
  }
  throw BackendError("cannot create a tensor on " + device.ToString() +
                     ": this build of mlframework has no CUDA backend (configure with nvcc available)");
}

}  // namespace mlframework::detail
