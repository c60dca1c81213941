// TensorBackend's FP8 defaults (TensorBackend.hpp, core/Float8Cast.hpp): a backend without FP8
// kernels whose tensors the host addresses runs the CPU backend's kernels on their memory; any
// other gets an error that says what to override.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <mlframework/core/Device.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/TensorBackend.hpp>

#include "mlframework/core/DeviceFactory.hpp"

namespace mlframework {

namespace {

// A CPU tensor over @p tensor's elements (no copy), or null when its HostBytes() are not its
// elements (empty, of another size, misaligned): the CPU kernels write Size() elements.
TensorPtr HostView(const ITensor& tensor) {
  const DataType dtype = tensor.GetDataType();
  const std::size_t size = tensor.Size();
  const detail::DeviceTensorHooks& hooks = detail::DeviceHooks(Device::CPU());
  if (size == 0) {
    return hooks.Wrap(nullptr, tensor.GetShape(), dtype, Device::CPU(), nullptr);
  }
  const std::span<const std::byte> bytes = tensor.HostBytes();
  const std::size_t element = ElementSize(dtype);
  if (bytes.size() != size * element || reinterpret_cast<std::uintptr_t>(bytes.data()) % element != 0 ||
      ElementCount(tensor.GetShape()) != size) {
    return nullptr;
  }
  // Writing through the view writes the tensor's elements, which MutableHostBytes() allows.
  return hooks.Wrap(const_cast<std::byte*>(bytes.data()), tensor.GetShape(), dtype, Device::CPU(), nullptr);
}

// The host views of every tensor of a call; InvalidOperationError naming @p backend and
// @p operation when one has no host-addressable elements.
class HostViews {
 public:
  HostViews(std::string_view backend, const char* operation) : backend_(backend), operation_(operation) {}

  TensorPtr Of(const ITensor& tensor) {
    TensorPtr view = HostView(tensor);
    if (!view) {
      throw InvalidOperationError("backend '" + std::string(backend_) + "' has no FP8 kernel for " + operation_ +
                                  " and its tensor on " + tensor.GetDevice().ToString() +
                                  " has no host-addressable elements (ITensor::HostBytes()): override "
                                  "TensorBackend::" +
                                  operation_);
    }
    kept_.push_back(view);
    return view;
  }

  template <typename Pointer, typename Tensor>
  std::vector<Pointer> All(std::span<Tensor* const> tensors) {
    std::vector<Pointer> pointers;
    pointers.reserve(tensors.size());
    for (Tensor* t : tensors) {
      pointers.push_back(Of(*t).get());
    }
    return pointers;
  }

 private:
  std::string_view backend_;
  const char* operation_;
  std::vector<TensorPtr> kept_;
};

}  // namespace

void TensorBackend::AmaxInto(std::span<const ITensor* const> tensors, ITensor& amax) const {
  HostViews views(Name(), "AmaxInto");
  const std::vector<const ITensor*> host = views.All<const ITensor*>(tensors);
  const TensorPtr host_amax = views.Of(amax);
  detail::BackendOf(Device::CPU()).AmaxInto(host, *host_amax);
}

void TensorBackend::ScaledCastToFloat8(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                       const ITensor& scale, ITensor* amax) const {
  HostViews views(Name(), "ScaledCastToFloat8");
  const std::vector<const ITensor*> host_src = views.All<const ITensor*>(src);
  const std::vector<ITensor*> host_dst = views.All<ITensor*>(dst);
  const TensorPtr host_scale = views.Of(scale);
  const TensorPtr host_amax = amax != nullptr ? views.Of(*amax) : nullptr;
  detail::BackendOf(Device::CPU()).ScaledCastToFloat8(host_src, host_dst, *host_scale, host_amax.get());
}

void TensorBackend::DequantizeFloat8(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                     const ITensor& scale_inv) const {
  HostViews views(Name(), "DequantizeFloat8");
  const std::vector<const ITensor*> host_src = views.All<const ITensor*>(src);
  const std::vector<ITensor*> host_dst = views.All<ITensor*>(dst);
  const TensorPtr host_scale_inv = views.Of(scale_inv);
  detail::BackendOf(Device::CPU()).DequantizeFloat8(host_src, host_dst, *host_scale_inv);
}

}  // namespace mlframework
