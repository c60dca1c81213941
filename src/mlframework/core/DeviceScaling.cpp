#include <mlframework/core/DeviceScaling.hpp>

#include <string>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/HostScaling.hpp>
#include <mlframework/core/Tensor.hpp>

namespace mlframework {

DeviceScaleState::~DeviceScaleState() = default;

DeviceScalingBackend::~DeviceScalingBackend() = default;

const DeviceScalingBackend* DeviceScalingOf(const ITensor& tensor) noexcept {
  const auto* own = dynamic_cast<const DeviceScalingBackend*>(tensor.Backend());
  return own != nullptr && dynamic_cast<const HostScalingBackend*>(own) == nullptr ? own : nullptr;
}

const DeviceScalingBackend& ScalingOf(const ITensor& tensor) noexcept {
  const auto* own = dynamic_cast<const DeviceScalingBackend*>(tensor.Backend());
  return own != nullptr ? *own : HostScaling();
}

std::vector<TensorPtr> Float32OutputsLike(std::span<const TensorPtr> like) {
  if (like.empty()) {
    return {};
  }
  if (!like[0]) {
    throw ArgumentNullError("like[0]");
  }
  const DeviceScalingBackend* device = DeviceScalingOf(*like[0]);
  if (device == nullptr) {
    return ZerosContiguousLike(like, DataType::Float32);
  }
  std::vector<TensorPtr> outputs;
  outputs.reserve(like.size());
  for (std::size_t i = 0; i < like.size(); ++i) {
    if (!like[i]) {
      throw ArgumentNullError("like[" + std::to_string(i) + "]");
    }
    outputs.push_back(device->Allocate(like[i]->GetShape(), DataType::Float32, like[i]->GetDevice()));
  }
  return outputs;
}

}  // namespace mlframework
