#include "mlframework/core/SameMemory.hpp"

#include <cstddef>
#include <span>

#include <mlframework/core/Error.hpp>

#include "mlframework/core/DeviceFactory.hpp"

namespace mlframework::detail {

namespace {

// The first element of @p tensor, or null when it cannot be told.
const void* MemoryOf(const ITensor& tensor) {
  const std::span<const std::byte> host = tensor.HostBytes();
  if (!host.empty()) {
    return host.data();
  }
  const Device device = tensor.GetDevice();
  if (device.IsCPU() || tensor.Size() == 0) {
    return nullptr;
  }
  try {
    const DeviceTensorHooks& hooks = DeviceHooks(device);
    return hooks.DataPointer != nullptr ? hooks.DataPointer(tensor) : nullptr;
  } catch (const BackendError&) {
    return nullptr;  // no backend registered for the device: not one of the library's tensors
  }
}

}  // namespace

bool SameMemory(const ITensor& a, const ITensor& b) {
  if (&a == &b) {
    return true;
  }
  if (a.GetDataType() != b.GetDataType() || a.Size() != b.Size() || a.GetDevice() != b.GetDevice()) {
    return false;
  }
  const void* memory = MemoryOf(a);
  return memory != nullptr && memory == MemoryOf(b);
}

}  // namespace mlframework::detail
