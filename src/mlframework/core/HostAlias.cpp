#include "mlframework/core/HostAlias.hpp"

#include <cstdint>
#include <utility>

#include <mlframework/core/Device.hpp>
#include <mlframework/core/Error.hpp>

#include "mlframework/core/DeviceFactory.hpp"

namespace mlframework::detail {

TensorPtr HostAlias(const ITensor& tensor, std::shared_ptr<void> owner) {
  if (tensor.Backend() != nullptr) {
    return nullptr;
  }
  const DataType dtype = tensor.GetDataType();
  if (!IsValid(dtype)) {
    return nullptr;
  }
  const std::size_t size = tensor.Size();
  if (size == 0 && ElementCount(tensor.GetShape()) == 0) {
    // No elements: nothing for a virtual to do, and an empty alias keeps the list on the kernels.
    return DeviceHooks(Device::CPU()).Wrap(nullptr, tensor.GetShape(), dtype, Device::CPU(), std::move(owner));
  }
  const std::span<const std::byte> bytes = tensor.HostBytes();
  const std::size_t element = ElementSize(dtype);
  // A span that disagrees with Size() is not trusted with a kernel that writes Size() elements;
  // such a tensor keeps the virtual path, which never reads HostBytes().
  if (bytes.empty() || bytes.size() / element != size || bytes.size() % element != 0 ||
      reinterpret_cast<std::uintptr_t>(bytes.data()) % element != 0 || ElementCount(tensor.GetShape()) != size) {
    return nullptr;
  }
  // The CPU backend registers its hooks while libmlframework loads, so they are always there.
  // Writing through the alias is writing the tensor's elements, which MutableHostBytes() allows.
  return DeviceHooks(Device::CPU())
      .Wrap(const_cast<std::byte*>(bytes.data()), tensor.GetShape(), dtype, Device::CPU(), std::move(owner));
}

TensorPtr OnABackend(const TensorPtr& tensor, const std::string& name) {
  if (tensor->Backend() != nullptr) {
    return tensor;
  }
  TensorPtr alias = HostAlias(*tensor, tensor);
  if (!alias) {
    throw ArgumentError(name,
                        "has no backend and no host-addressable elements (ITensor::HostBytes()): the FP8 kernels "
                        "cannot reach its memory");
  }
  return alias;
}

std::optional<std::vector<TensorPtr>> WithHostAliases(std::span<const TensorPtr> tensors) {
  std::optional<std::vector<TensorPtr>> resolved;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    TensorPtr alias = HostAlias(*tensors[i], tensors[i]);
    if (!alias) {
      continue;
    }
    if (!resolved) {
      resolved.emplace(tensors.begin(), tensors.end());
    }
    (*resolved)[i] = std::move(alias);
  }
  return resolved;
}

}  // namespace mlframework::detail
