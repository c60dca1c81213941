#include <mlframework/core/DeviceScaling.hpp>

namespace mlframework {

DeviceScaleState::~DeviceScaleState() = default;

DeviceScalingBackend::~DeviceScalingBackend() = default;

const DeviceScalingBackend* DeviceScalingOf(const ITensor& tensor) noexcept {
  return dynamic_cast<const DeviceScalingBackend*>(tensor.Backend());
}

}  // namespace mlframework
