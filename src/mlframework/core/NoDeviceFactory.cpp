// Builds without the CUDA backend: device tensors cannot be made.
#include <mlframework/core/Error.hpp>

#include "mlframework/core/DeviceFactory.hpp"

namespace mlframework::detail {

TensorPtr MakeDeviceTensor(const Shape& /*shape*/, DataType /*dtype*/, Device device) {
  throw BackendError("cannot create a tensor on " + device.ToString() +
                     ": this build of mlframework has no CUDA backend (configure with nvcc available)");
}

}  // namespace mlframework::detail
