#pragma once
// Private: creation of tensors on non-CPU devices. Builds with CUDA define it in
// the CUDA backend; other builds define it to raise a clear BackendError.

#include <mlframework/core/Device.hpp>
#include <mlframework/core/ITensor.hpp>

namespace mlframework::detail {

/// A zero-filled tensor on @p device (not the CPU); BackendError when unavailable.
TensorPtr MakeDeviceTensor(const Shape& shape, DataType dtype, Device device);

}  // namespace mlframework::detail
