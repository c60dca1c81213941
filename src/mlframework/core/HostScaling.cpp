#include <mlframework/core/HostScaling.hpp>

#include <array>
#include <string>
#include <string_view>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

namespace mlframework {

namespace {

// Non-owning shared pointers (the aliasing constructor with no owner allocates nothing), so
// the raw-pointer kernels can run core's list functions; the caller keeps the tensors alive.
template <typename Pointer>
std::vector<TensorPtr> Borrowed(std::span<Pointer const> tensors) {
  std::vector<TensorPtr> list;
  list.reserve(tensors.size());
  for (Pointer tensor : tensors) {
    list.emplace_back(TensorPtr(), const_cast<ITensor*>(tensor));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  }
  return list;
}

HostScaleState& HostState(DeviceScaleState& state) {
  auto* host = dynamic_cast<HostScaleState*>(&state);
  if (host == nullptr) {
    throw ArgumentError("state", "is a state in " + state.GetDevice().ToString() +
                                     " memory, but a host scaling backend needs a HostScaleState");
  }
  return *host;
}

// HostScaling(): the kernels are core's multi-tensor functions, which run each tensor's own
// backend where it has one and the per-tensor virtual operations where it has none.
class GenericHostScaling final : public HostScalingBackend {
 public:
  std::string_view Name() const noexcept override { return "host"; }
  bool UnscaleAndCheck(std::span<ITensor* const> tensors, float factor) const override {
    return mlframework::UnscaleAndCheck(Borrowed(tensors), factor);
  }
  void Scale(std::span<ITensor* const> tensors, float factor) const override {
    ScaleInPlace(Borrowed(tensors), factor);
  }
  bool CastInto(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float factor) const override {
    return mlframework::CastInto(Borrowed(src), Borrowed(dst), factor);
  }
  NonFiniteAndAmax UnscaleCheckAndAmax(std::span<ITensor* const> tensors, float factor) const override {
    return mlframework::UnscaleCheckAndAmax(Borrowed(tensors), factor);
  }
  NonFiniteAndAmax CastIntoAndAmax(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                   float factor) const override {
    return mlframework::CastIntoAndAmax(Borrowed(src), Borrowed(dst), factor);
  }
};

}  // namespace

HostScalingBackend::~HostScalingBackend() = default;

std::unique_ptr<DeviceScaleState> HostScalingBackend::CreateScaleState(Device /*device*/, const ScalePolicy& policy,
                                                                       const ScaleState& initial) const {
  return std::make_unique<HostScaleState>(policy, initial);
}

void HostScalingBackend::ScaleWithState(std::span<ITensor* const> tensors, DeviceScaleState& state) const {
  Scale(tensors, HostState(state).CurrentScale());
}

namespace {

// Records a pass with the amax into @p host.
void Record(HostScaleState& host, const NonFiniteAndAmax& result) {
  host.Record(result.FoundNonFinite);
  host.RecordAmax(result.Amax);
}

}  // namespace

// Each unscale picks the amax pass or the plain one once (never per element): without tracking
// the kernels are exactly the plain ones. The checks never take the amax (DeviceScaleState, "Amax").

void HostScalingBackend::UnscaleWithState(std::span<ITensor* const> tensors, DeviceScaleState& state) const {
  HostScaleState& host = HostState(state);
  if (host.AmaxTracking()) {
    Record(host, UnscaleCheckAndAmax(tensors, InverseScale(host.CurrentScale())));
    return;
  }
  host.Record(UnscaleAndCheck(tensors, InverseScale(host.CurrentScale())));
}

void HostScalingBackend::CastUnscaledWithState(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                               DeviceScaleState& state) const {
  HostScaleState& host = HostState(state);
  if (host.AmaxTracking()) {
    Record(host, CastIntoAndAmax(src, dst, InverseScale(host.CurrentScale())));
    return;
  }
  host.Record(CastInto(src, dst, InverseScale(host.CurrentScale())));
}

void HostScalingBackend::CheckWithState(std::span<const ITensor* const> tensors, DeviceScaleState& state) const {
  HostState(state).Record(mlframework::HasNonFinite(Borrowed(tensors)));
}

void HostScalingBackend::FlagToTensor(const DeviceScaleState& state, TensorPtr& out) const {
  const auto* host_state = dynamic_cast<const HostScaleState*>(&state);
  if (host_state == nullptr) {
    throw ArgumentError("state", "is a state in " + state.GetDevice().ToString() +
                                     " memory, but a host scaling backend needs a HostScaleState");
  }
  const HostScaleState& host = *host_state;
  const std::size_t count = host.AmaxTracking() ? 2 : 1;
  const std::array<float, 2> values{host.FoundInf() ? 1.0f : 0.0f, host.Amax()};  // a host state: no wait
  if (!out || out->GetDataType() != DataType::Float32 || out->Size() != count || !out->GetDevice().IsCPU()) {
    out = Zeros({count});
  }
  out->CopyFromFloats(std::span<const float>(values.data(), count));
}

void HostScalingBackend::FlagFromTensor(DeviceScaleState& state, const ITensor& in) const {
  HostScaleState& host = HostState(state);
  const std::size_t count = host.AmaxTracking() ? 2 : 1;
  if (in.GetDataType() != DataType::Float32 || in.Size() != count || !in.GetDevice().IsCPU()) {
    throw ArgumentError("in", "must be an FP32 host tensor of " + std::to_string(count) + " element(s), got " +
                                  std::to_string(in.Size()) + " elements of " +
                                  std::string(ToString(in.GetDataType())) + " on " + in.GetDevice().ToString());
  }
  const std::vector<float> values = in.ToFloatVector();
  host.ClearFoundInf();
  host.Record(values[0] != 0.0f);
  if (count == 2) {
    host.SetAmax(values[1]);
  }
}

void HostScalingBackend::UpdateScale(DeviceScaleState& state) const { HostState(state).Update(); }

void HostScalingBackend::UnscaleListWithState(std::span<const TensorPtr> tensors, DeviceScaleState& state) const {
  HostScaleState& host = HostState(state);
  if (host.AmaxTracking()) {
    Record(host, mlframework::UnscaleCheckAndAmax(tensors, InverseScale(host.CurrentScale())));
    return;
  }
  host.Record(mlframework::UnscaleAndCheck(tensors, InverseScale(host.CurrentScale())));
}

void HostScalingBackend::CastUnscaledListWithState(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                                                   DeviceScaleState& state) const {
  HostScaleState& host = HostState(state);
  if (host.AmaxTracking()) {
    Record(host, mlframework::CastIntoAndAmax(src, dst, InverseScale(host.CurrentScale())));
    return;
  }
  host.Record(mlframework::CastInto(src, dst, InverseScale(host.CurrentScale())));
}

void HostScalingBackend::CheckListWithState(std::span<const TensorPtr> tensors, DeviceScaleState& state) const {
  HostState(state).Record(mlframework::HasNonFinite(tensors));
}

TensorPtr HostScalingBackend::ScaledLoss(const ITensor& loss, DeviceScaleState& state) const {
  return loss.Multiply(HostState(state).CurrentScale());
}

std::vector<TensorPtr> HostScalingBackend::Float32Outputs(std::span<const TensorPtr> like) const {
  return ZerosContiguousLike(like, DataType::Float32);
}

const HostScalingBackend& HostScaling() noexcept {
  static const GenericHostScaling kBackend;
  return kBackend;
}

}  // namespace mlframework
