// Builds without the CUDA backend: the queries answer "no device" and every
// request for CUDA memory or work raises a clear BackendError.
#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/backends/cuda/StreamGuard.hpp>
#include <mlframework/core/Error.hpp>

#include "mlframework/core/DeviceFactory.hpp"

namespace mlframework::backends::cuda {

namespace {

// The same words as core's NoDeviceFactory.cpp, so Zeros(..., Device::CUDA(i)) and
// UnavailableReason() tell the same story.
constexpr const char* kNotBuilt = "this build of mlframework has no CUDA backend (configure with nvcc available)";

}  // namespace

bool IsBuilt() noexcept { return false; }

int DeviceCount() noexcept { return 0; }

bool IsAvailable() noexcept { return false; }

std::string UnavailableReason() { return kNotBuilt; }

std::string DeviceName(int device) {
  throw BackendError("cannot query cuda:" + std::to_string(device) + ": " + kNotBuilt);
}

TensorPtr Empty(const Shape& /*shape*/, DataType /*dtype*/, int device) {
  throw BackendError("cannot create a tensor on cuda:" + std::to_string(device) + ": " + kNotBuilt);
}

// The by-value parameters are the public signature's (the CUDA build moves them into the tensor).
TensorPtr Wrap(void* data, Shape shape, DataType dtype, int device,  // NOLINT(performance-unnecessary-value-param)
               std::shared_ptr<void> /*owner*/) {                    // NOLINT(performance-unnecessary-value-param)
  mlframework::detail::CheckWrapArguments(data, shape, dtype);       // bad arguments fail as in a CUDA build
  throw BackendError("cannot wrap memory of cuda:" + std::to_string(device) + ": " + kNotBuilt);
}

bool IsCudaTensor(const ITensor& /*tensor*/) noexcept { return false; }

void* DevicePointer(ITensor& tensor) {
  throw ArgumentError("tensor", "is not a CUDA-backend tensor (device " + tensor.GetDevice().ToString() + ")");
}

void* StreamHandle(int device) { throw BackendError("cannot use cuda:" + std::to_string(device) + ": " + kNotBuilt); }

void Synchronize(int device) { throw BackendError("cannot use cuda:" + std::to_string(device) + ": " + kNotBuilt); }

const DeviceScalingBackend& Backend() { throw BackendError(kNotBuilt); }

StreamGuard::StreamGuard(void* stream, int device) : stream_(stream), device_(device) {
  if (device < 0) {
    throw ArgumentError("device", std::to_string(device) + " is negative");  // as in a CUDA build
  }
  throw BackendError("cannot use cuda:" + std::to_string(device) + ": " + kNotBuilt);
}

StreamGuard::~StreamGuard() = default;

void* CurrentExternalStream(int /*device*/) noexcept { return nullptr; }

}  // namespace mlframework::backends::cuda
