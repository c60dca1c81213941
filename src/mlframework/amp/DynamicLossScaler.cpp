#include <mlframework/amp/DynamicLossScaler.hpp>

#include <limits>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/amp/UnscaleWorkspace.hpp"
#include "mlframework/core/ScaleStateOwner.hpp"
#include "mlframework/core/StateBlob.hpp"
#include "mlframework/core/Validation.hpp"

namespace mlframework::amp {

namespace {

constexpr char kAmpDynamicKind[] = "amp.DynamicLossScaler";
constexpr std::uint16_t kAmpDynamicVersion = 1;
constexpr char kSnapshotKind[] = "amp.DynamicLossScaler.snapshot";
constexpr std::uint16_t kSnapshotVersion = 1;

}  // namespace

ScalePolicy DynamicScalerConfig::ToScalePolicy() const {
  return ScalePolicy{.InitialScale = InitialScale,
                     .GrowthFactor = GrowthFactor,
                     .BackoffFactor = BackoffFactor,
                     .GrowthInterval = GrowthInterval,
                     .MinScale = MinScale,
                     .MaxScale = MaxScale,
                     .Hysteresis = Hysteresis};
}

void DynamicScalerConfig::Validate() const {
  ValidateScalePolicy(ToScalePolicy());
  // Every scale the rules can reach lies in [MinScale, MaxScale]; its inverse must be a finite float.
  detail::RequireScale(MinScale, "MinScale");
}

struct DynamicLossScaler::Impl {
  explicit Impl(const DynamicScalerConfig& c)
      : config(c), owner(c.ToScalePolicy(), ScaleState::Initial(c.ToScalePolicy())) {}
  // A copy: same configuration, the state read from @p other (a host state, no record, no buffers).
  Impl(const DynamicScalerConfig& c, mlframework::detail::ScaleStateOwner other) : config(c), owner(std::move(other)) {}
  DynamicScalerConfig config;
  mlframework::detail::ScaleStateOwner owner;  // the single owner of the state (core/ScaleStateOwner.hpp)
  detail::CachedScalar scale_tensor;
  detail::CachedScalar inverse_tensor;
  detail::UnscaleWorkspace workspace;

  float Factor() const { return config.Enabled ? owner.Read().Scale : 1.0f; }
  // Whether @p list holds Inf or NaN, the record of the step kept around the check.
  bool CheckOwn(std::span<const TensorPtr> list, const char* parameter) {
    owner.Place(list, parameter);
    return owner.OwnResult([&] { owner.Check(list); });
  }
};

DynamicLossScaler::DynamicLossScaler(DynamicScalerConfig config) {
  config.Validate();
  impl_ = std::make_unique<Impl>(config);
}

DynamicLossScaler::~DynamicLossScaler() = default;

DynamicLossScaler::DynamicLossScaler(const DynamicLossScaler& other)
    : ILossScaler(other), impl_(std::make_unique<Impl>(other.impl_->config, other.impl_->owner)) {}

DynamicLossScaler& DynamicLossScaler::operator=(const DynamicLossScaler& other) {
  if (this != &other) {
    impl_ = std::make_unique<Impl>(other.impl_->config, other.impl_->owner);
  }
  return *this;
}

float DynamicLossScaler::CurrentScale() const { return impl_->owner.Read().Scale; }
bool DynamicLossScaler::IsEnabled() const { return impl_->config.Enabled; }
bool DynamicLossScaler::SetEnabled(bool enabled) {
  impl_->config.Enabled = enabled;
  return true;
}
const DynamicScalerConfig& DynamicLossScaler::Config() const noexcept { return impl_->config; }
ScaleState DynamicLossScaler::State() const { return impl_->owner.Read(); }
DeviceScaleState* DynamicLossScaler::DeviceState() const noexcept { return impl_->owner.DeviceState(); }

TensorPtr DynamicLossScaler::ScaleLoss(const TensorPtr& loss) {
  if (!loss) {
    throw ArgumentNullError("loss");
  }
  TensorPtr scaled = impl_->config.Enabled ? impl_->owner.ScaleLoss(loss) : loss;
  impl_->workspace.BeginStep();  // a new loss: the last step's unscaled gradients may be written again
  return scaled;
}

GradientMap DynamicLossScaler::UnscaleGradients(const GradientMap& gradients) {
  return UnscaleAndRecordOverflow(gradients);
}

GradientMap DynamicLossScaler::UnscaleAndRecordOverflow(const GradientMap& gradients) {
  const std::vector<TensorPtr> list =
      mlframework::detail::LossScalingList(gradients);  // ArgumentNullError naming a null entry
  if (!impl_->config.Enabled) {
    return gradients;
  }
  return impl_->workspace.Run(gradients, list, impl_->owner);
}

UnscaledGradients DynamicLossScaler::UnscaleGradientsAndCheck(const GradientMap& gradients) {
  const std::vector<TensorPtr> list =
      mlframework::detail::LossScalingList(gradients);  // same null check as when enabled
  if (!impl_->config.Enabled) {
    return UnscaledGradients{gradients, false};
  }
  Impl& s = *impl_;
  UnscaledGradients result;
  result.Overflow = s.owner.OwnResult([&] { result.Gradients = s.workspace.Run(gradients, list, s.owner); });
  return result;
}

TensorPtr DynamicLossScaler::UnscaleGradient(const TensorPtr& gradient) {
  mlframework::detail::RequireLossScalable(gradient, "gradient");
  if (!impl_->config.Enabled) {
    return gradient;
  }
  mlframework::detail::ScaleStateOwner& owner = impl_->owner;
  const TensorPtr list[] = {gradient};
  owner.Place(list, "gradient");
  if (gradient->GetDataType() == DataType::Float32) {
    owner.Unscale(list, {}, {});
    return gradient;
  }
  const std::vector<TensorPtr> result = Float32OutputsLike(list);
  owner.Unscale({}, list, result);
  return result[0];
}

bool DynamicLossScaler::CheckOverflow(const GradientMap& gradients) {
  const std::vector<TensorPtr> list = mlframework::detail::LossScalingList(gradients);
  if (!impl_->config.Enabled) {
    return false;
  }
  return impl_->CheckOwn(list, "gradients");
}

bool DynamicLossScaler::CheckOverflow(const TensorPtr& gradient) {
  mlframework::detail::RequireLossScalable(gradient, "gradient");
  if (!impl_->config.Enabled) {
    return false;
  }
  const TensorPtr list[] = {gradient};
  return impl_->CheckOwn(list, "gradient");
}

void DynamicLossScaler::RecordOverflow(const GradientMap& gradients) {
  const std::vector<TensorPtr> list = mlframework::detail::LossScalingList(gradients);
  if (!impl_->config.Enabled) {
    return;
  }
  impl_->owner.Place(list, "gradients");
  impl_->owner.Check(list);
}

void DynamicLossScaler::MarkOverflow() {
  if (impl_->config.Enabled) {
    impl_->owner.Record(true);
  }
}

bool DynamicLossScaler::RecordedOverflow() const { return impl_->config.Enabled && impl_->owner.Recorded(); }

void DynamicLossScaler::ClearRecordedOverflow() {
  impl_->owner.ClearRecord();
  impl_->owner.ClearAmax();
}

bool DynamicLossScaler::SetAmaxTracking(bool on) {
  impl_->owner.SetAmaxTracking(on);
  return true;
}

std::optional<float> DynamicLossScaler::RecordedAmax() const {
  return impl_->owner.AmaxTracking() ? std::optional<float>(impl_->owner.Amax()) : std::nullopt;
}

void DynamicLossScaler::UpdateScale(bool overflow) {
  if (impl_->config.Enabled) {
    impl_->owner.Update(overflow);
  }
}

void DynamicLossScaler::UpdateScaleFromRecord() {
  if (impl_->config.Enabled) {
    impl_->owner.UpdateFromRecord();
  } else {
    impl_->owner.ClearRecord();
  }
}

TensorPtr DynamicLossScaler::GetScaleTensor() { return impl_->scale_tensor.Get(impl_->Factor()); }

TensorPtr DynamicLossScaler::GetInverseScaleTensor() {
  return impl_->inverse_tensor.Get(impl_->config.Enabled ? InverseScale(impl_->owner.Read().Scale) : 1.0f);
}

std::optional<DynamicScalerStats> DynamicLossScaler::GetStats() const {
  const ScaleState s = impl_->owner.Read();
  return DynamicScalerStats{.CurrentScale = s.Scale,
                            .StepsSinceLastOverflow = s.StepsSinceLastOverflow,
                            .ConsecutiveOverflows = s.ConsecutiveOverflows,
                            .TotalOverflows = s.TotalOverflows,
                            .TotalSteps = s.TotalSteps,
                            .SkippedSteps = s.TotalOverflows,
                            .SuccessfulSteps = s.TotalSteps - s.TotalOverflows,
                            .MinScale = impl_->config.MinScale,
                            .MaxScale = impl_->config.MaxScale,
                            .GrowthInterval = impl_->config.GrowthInterval};
}

void DynamicLossScaler::Reset() { impl_->owner.Write(ScaleState::Initial(impl_->owner.Policy())); }

std::vector<std::byte> DynamicLossScaler::StateDict() const {
  const DynamicScalerConfig& c = impl_->config;
  mlframework::detail::BlobWriter writer(kAmpDynamicKind, kAmpDynamicVersion);
  writer.F32(c.InitialScale);
  writer.F32(c.GrowthFactor);
  writer.F32(c.BackoffFactor);
  writer.I64(c.GrowthInterval);
  writer.F32(c.MinScale);
  writer.F32(c.MaxScale);
  writer.I64(c.Hysteresis);
  writer.U8(c.Enabled ? 1 : 0);
  writer.ScaleStateFields(impl_->owner.Read());
  return writer.Finish();
}

void DynamicLossScaler::LoadStateDict(std::span<const std::byte> state) {
  mlframework::detail::BlobReader reader(state, kAmpDynamicKind, kAmpDynamicVersion);
  DynamicScalerConfig config;
  config.InitialScale = reader.F32();
  config.GrowthFactor = reader.F32();
  config.BackoffFactor = reader.F32();
  const std::int64_t interval = reader.I64();
  config.MinScale = reader.F32();
  config.MaxScale = reader.F32();
  const std::int64_t hysteresis = reader.I64();
  const std::uint8_t enabled = reader.U8();
  const ScaleState scale_state = reader.ScaleStateFields();
  reader.ExpectEnd();
  if (interval < 1 || interval > std::numeric_limits<int>::max() || hysteresis < 1 ||
      hysteresis > std::numeric_limits<int>::max()) {
    reader.Fail("GrowthInterval " + std::to_string(interval) + " or Hysteresis " + std::to_string(hysteresis) +
                " is out of range");
  }
  if (enabled > 1) {
    reader.Fail("enabled flag " + std::to_string(enabled) + " is not 0 or 1");
  }
  config.GrowthInterval = static_cast<int>(interval);
  config.Hysteresis = static_cast<int>(hysteresis);
  config.Enabled = enabled == 1;
  try {
    config.Validate();
  } catch (const ArgumentError& error) {
    reader.Fail(std::string("holds an invalid configuration: ") + error.what());
  }
  if (scale_state.Scale < config.MinScale || scale_state.Scale > config.MaxScale) {
    reader.Fail("stored scale " + std::to_string(scale_state.Scale) + " lies outside [MinScale, MaxScale]");
  }
  auto next = std::make_unique<Impl>(config);
  next->owner.Write(scale_state);                            // a host state until the next operation on device tensors
  next->owner.SetAmaxTracking(impl_->owner.AmaxTracking());  // a setting of this scaler, not in the blob
  impl_ = std::move(next);
}

std::vector<std::byte> DynamicLossScaler::ScaleSnapshot() const {
  mlframework::detail::BlobWriter writer(kSnapshotKind, kSnapshotVersion);
  writer.ScaleStateFields(impl_->owner.Read());
  return writer.Finish();
}

void DynamicLossScaler::RestoreScaleSnapshot(std::span<const std::byte> snapshot) {
  mlframework::detail::BlobReader reader(snapshot, kSnapshotKind, kSnapshotVersion, "snapshot");
  const ScaleState scale_state = reader.ScaleStateFields();
  reader.ExpectEnd();
  if (scale_state.Scale < impl_->config.MinScale || scale_state.Scale > impl_->config.MaxScale) {
    reader.Fail("scale " + std::to_string(scale_state.Scale) + " lies outside [MinScale, MaxScale]");
  }
  impl_->owner.Write(scale_state);  // also clears the record
  impl_->owner.ClearAmax();
}

}  // namespace mlframework::amp
