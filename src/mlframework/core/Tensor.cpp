#include <mlframework/core/Tensor.hpp>

#include <utility>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/config.hpp>
#include <mlframework/core/Error.hpp>

#include "mlframework/core/DeviceFactory.hpp"

namespace mlframework {

namespace {

void RequireValidDtype(DataType dtype) {
  if (!IsValid(dtype)) {
    throw ArgumentError("dtype", "value " + std::to_string(static_cast<int>(dtype)) + " is not a DataType");
  }
}

}  // namespace

TensorPtr Zeros(Shape shape, DataType dtype, Device device) {
  RequireValidDtype(dtype);
  if (device.IsCPU()) {
    return backends::cpu::Empty(std::move(shape), dtype);
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

TensorPtr Scalar(float value, DataType dtype, Device device) { return FromVector({value}, Shape{}, dtype, device); }

}  // namespace mlframework
