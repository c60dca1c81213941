#include <mlframework/core/HostScaling.hpp>

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>

namespace mlframework {

namespace {

// HostScaling(): the backend of the host states of tensors whose own backend keeps none.
class GenericHostScaling final : public HostScalingBackend {
 public:
  std::string_view Name() const noexcept override { return "host"; }
};

}  // namespace

void HostScaleState::FlagToTensor(TensorPtr& out) const {
  const std::size_t count = AmaxTracking() ? 2 : 1;
  const std::array<float, 2> values{found_inf_ ? 1.0f : 0.0f, amax_};
  if (!out || out->GetDataType() != DataType::Float32 || out->Size() != count || !out->GetDevice().IsCPU()) {
    out = Zeros({count});
  }
  out->CopyFromFloats(std::span<const float>(values.data(), count));
}

void HostScaleState::FlagFromTensor(const ITensor& in) {
  const std::size_t count = AmaxTracking() ? 2 : 1;
  if (in.GetDataType() != DataType::Float32 || in.Size() != count || !in.GetDevice().IsCPU()) {
    throw ArgumentError("in", "must be an FP32 host tensor of " + std::to_string(count) + " element(s), got " +
                                  std::to_string(in.Size()) + " elements of " +
                                  std::string(ToString(in.GetDataType())) + " on " + in.GetDevice().ToString());
  }
  const std::vector<float> values = in.ToFloatVector();
  found_inf_ = values[0] != 0.0f;
  if (count == 2) {
    amax_ = values[1];
  }
}

HostScalingBackend::~HostScalingBackend() = default;

std::unique_ptr<DeviceScaleState> HostScalingBackend::CreateScaleState(Device /*device*/, const ScalePolicy& policy,
                                                                       const ScaleState& initial) const {
  return std::make_unique<HostScaleState>(policy, initial);
}

void HostScalingBackend::UpdateScale(DeviceScaleState& state) const {
  auto* host = dynamic_cast<HostScaleState*>(&state);
  if (host == nullptr) {
    throw ArgumentError("state", "is a state in " + state.GetDevice().ToString() +
                                     " memory, but a host scaling backend needs a HostScaleState");
  }
  host->Update();
}

const HostScalingBackend& HostScaling() noexcept {
  static const GenericHostScaling kBackend;
  return kBackend;
}

}  // namespace mlframework
