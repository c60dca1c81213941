#pragma once
// Private: how a backend's public functions (the CPU backend's Data(), the CUDA backend's
// DevicePointer()) take an ITensor that must be one of the backend's own tensor class.

#include <string>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/ITensor.hpp>

namespace mlframework::detail {

/// @p tensor as the backend's tensor class @p Tensor (const-qualified for a const @p tensor);
/// ArgumentError naming `tensor`, its device and @p backend ("CPU", "CUDA") when it is another
/// tensor.
template <typename Tensor, typename Interface>
Tensor& BackendTensor(Interface& tensor, const char* backend) {
  auto* own = dynamic_cast<Tensor*>(&tensor);
  if (own == nullptr) {
    throw ArgumentError("tensor", "is not a " + std::string(backend) + "-backend tensor (device " +
                                      tensor.GetDevice().ToString() + ")");
  }
  return *own;
}

}  // namespace mlframework::detail
