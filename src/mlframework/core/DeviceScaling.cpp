#include <mlframework/core/DeviceScaling.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/HostScaling.hpp>

namespace mlframework {

namespace {

template <typename Pointer>
std::vector<Pointer> Raw(std::span<const TensorPtr> tensors) {
  std::vector<Pointer> raw;
  raw.reserve(tensors.size());
  for (const TensorPtr& tensor : tensors) {
    raw.push_back(tensor.get());
  }
  return raw;
}

}  // namespace

DeviceScaleState::~DeviceScaleState() = default;

DeviceScalingBackend::~DeviceScalingBackend() = default;

void DeviceScalingBackend::UnscaleListWithState(std::span<const TensorPtr> tensors, DeviceScaleState& state) const {
  UnscaleWithState(Raw<ITensor*>(tensors), state);
}

void DeviceScalingBackend::CastUnscaledListWithState(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                                                     DeviceScaleState& state) const {
  CastUnscaledWithState(Raw<const ITensor*>(src), Raw<ITensor*>(dst), state);
}

void DeviceScalingBackend::CheckListWithState(std::span<const TensorPtr> tensors, DeviceScaleState& state) const {
  CheckWithState(Raw<const ITensor*>(tensors), state);
}

TensorPtr DeviceScalingBackend::ScaledLoss(const ITensor& loss, DeviceScaleState& state) const {
  TensorPtr scaled = loss.Clone();
  ITensor* const raw[] = {scaled.get()};
  ScaleWithState(raw, state);
  return scaled;
}

std::vector<TensorPtr> DeviceScalingBackend::Float32Outputs(std::span<const TensorPtr> like) const {
  std::vector<TensorPtr> outputs;
  outputs.reserve(like.size());
  for (const TensorPtr& tensor : like) {
    outputs.push_back(tensor->CastTo(DataType::Float32));
  }
  return outputs;
}

const DeviceScalingBackend* DeviceScalingOf(const ITensor& tensor) noexcept {
  const auto* own = dynamic_cast<const DeviceScalingBackend*>(tensor.Backend());
  return own != nullptr && !own->StatesInHostMemory() ? own : nullptr;
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
  return ScalingOf(*like[0]).Float32Outputs(like);
}

}  // namespace mlframework
