#include <mlframework/core/Tensor.hpp>

#include <cstdint>
#include <string>
#include <utility>

#include <mlframework/config.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/TensorBackend.hpp>

#include "mlframework/core/DeviceFactory.hpp"

namespace mlframework {

namespace {

void RequireValidDtype(DataType dtype) {
  if (!IsValid(dtype)) {
    throw ArgumentError("dtype", "value " + std::to_string(static_cast<int>(dtype)) + " is not a DataType");
  }
}

std::size_t AddChecked(std::size_t total, std::size_t add) {
  if (add > SIZE_MAX - total) {
    throw ArgumentError("shapes", "hold more elements in total than fit in size_t");
  }
  return total + add;
}

// A view of `shape` at `offset` elements into `buffer` (a tensor of the device's own backend).
TensorPtr ViewOf(const TensorPtr& buffer, std::size_t offset, const Shape& shape) {
  const TensorBackend* backend = buffer->Backend();
  if (backend == nullptr) {
    throw InvalidOperationError("ZerosContiguous: tensors on device " + buffer->GetDevice().ToString() +
                                " have no backend that can make views");
  }
  return backend->View(buffer, offset, shape);
}

}  // namespace

// The public signature takes the shape by value; the backends take it by reference.
TensorPtr Zeros(Shape shape, DataType dtype, Device device) {  // NOLINT(performance-unnecessary-value-param)
  RequireValidDtype(dtype);
  if (device.IsCPU()) {
    return detail::BackendOf(Device::CPU()).Allocate(shape, dtype, device);
  }
  return detail::MakeDeviceTensor(shape, dtype, device);
}

TensorPtr FromVector(const std::vector<float>& values, Shape shape, DataType dtype, Device device) {
  RequireValidDtype(dtype);
  const std::size_t count = ElementCount(shape);
  if (values.size() != count) {
    throw ArgumentError("values", "has " + std::to_string(values.size()) + " elements but shape " + ToString(shape) +
                                      " needs " + std::to_string(count));
  }
  TensorPtr tensor = Zeros(std::move(shape), dtype, device);
  tensor->CopyFromFloats(values);
  return tensor;
}

std::vector<TensorPtr> ZerosContiguous(const std::vector<Shape>& shapes, DataType dtype, Device device) {
  RequireValidDtype(dtype);
  if (shapes.empty()) {
    return {};
  }
  // No padding between tensors: the CPU kernels join tensors that lie exactly back to back into
  // one run of memory, so a whole list streams like one flat tensor (a gap would split it).
  std::vector<std::size_t> offsets;
  offsets.reserve(shapes.size());
  std::size_t total = 0;
  for (const Shape& shape : shapes) {
    offsets.push_back(total);
    total = AddChecked(total, ElementCount(shape));
  }
  const TensorPtr buffer = Zeros({total}, dtype, device);
  std::vector<TensorPtr> tensors;
  tensors.reserve(shapes.size());
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    tensors.push_back(ViewOf(buffer, offsets[i], shapes[i]));
  }
  return tensors;
}

std::vector<TensorPtr> ZerosContiguousLike(std::span<const TensorPtr> like, DataType dtype) {
  RequireValidDtype(dtype);
  // Group by device (a list rarely spans more than one), keeping each group in list order.
  std::vector<Device> devices;
  std::vector<std::vector<std::size_t>> members;
  for (std::size_t i = 0; i < like.size(); ++i) {
    if (!like[i]) {
      throw ArgumentNullError("like[" + std::to_string(i) + "]");
    }
    const Device device = like[i]->GetDevice();
    std::size_t group = 0;
    while (group < devices.size() && devices[group] != device) {
      ++group;
    }
    if (group == devices.size()) {
      devices.push_back(device);
      members.emplace_back();
    }
    members[group].push_back(i);
  }
  std::vector<TensorPtr> result(like.size());
  for (std::size_t group = 0; group < devices.size(); ++group) {
    std::vector<Shape> shapes;
    shapes.reserve(members[group].size());
    for (const std::size_t i : members[group]) {
      shapes.push_back(like[i]->GetShape());
    }
    std::vector<TensorPtr> tensors = ZerosContiguous(shapes, dtype, devices[group]);
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      result[members[group][k]] = std::move(tensors[k]);
    }
  }
  return result;
}

TensorPtr Scalar(float value, DataType dtype, Device device) { return FromVector({value}, Shape{}, dtype, device); }

}  // namespace mlframework
