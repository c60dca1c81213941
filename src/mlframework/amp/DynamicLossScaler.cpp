#include <mlframework/amp/DynamicLossScaler.hpp>

#include <limits>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/amp/UnscaleWorkspace.hpp"
#include "mlframework/core/StateBlob.hpp"

namespace mlframework::amp {

namespace {

constexpr char kKind[] = "amp.DynamicLossScaler";
constexpr std::uint16_t kVersion = 1;

// A scalar tensor cached for one value; rebuilt only when the value changes.
struct CachedScalar {
  TensorPtr Get(float value) {
    if (!tensor || cached != value) {
      tensor = Scalar(value);
      cached = value;
    }
    return tensor;
  }
  TensorPtr tensor;
  float cached = 0.0f;
};

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
      : config(c), policy(c.ToScalePolicy()), state(ScaleState::Initial(policy)) {}
  DynamicScalerConfig config;
  ScalePolicy policy;
  ScaleState state;
  CachedScalar scale_tensor;
  CachedScalar inverse_tensor;
  detail::UnscaleWorkspace workspace;

  float Factor() const { return config.Enabled ? state.Scale : 1.0f; }
};

DynamicLossScaler::DynamicLossScaler(DynamicScalerConfig config) {
  config.Validate();
  impl_ = std::make_unique<Impl>(config);
}

DynamicLossScaler::~DynamicLossScaler() = default;

DynamicLossScaler::DynamicLossScaler(const DynamicLossScaler& other)
    : impl_(std::make_unique<Impl>(other.impl_->config)) {
  impl_->state = other.impl_->state;
}

DynamicLossScaler& DynamicLossScaler::operator=(const DynamicLossScaler& other) {
  if (this != &other) {
    auto copy = std::make_unique<Impl>(other.impl_->config);
    copy->state = other.impl_->state;
    impl_ = std::move(copy);
  }
  return *this;
}

float DynamicLossScaler::Scale() const { return impl_->state.Scale; }
bool DynamicLossScaler::Enabled() const { return impl_->config.Enabled; }
void DynamicLossScaler::SetEnabled(bool enabled) { impl_->config.Enabled = enabled; }
float DynamicLossScaler::CurrentScale() const { return impl_->state.Scale; }
const DynamicScalerConfig& DynamicLossScaler::Config() const noexcept { return impl_->config; }
const ScaleState& DynamicLossScaler::State() const noexcept { return impl_->state; }

TensorPtr DynamicLossScaler::ScaleLoss(const TensorPtr& loss) {
  if (!loss) {
    throw ArgumentNullError("loss");
  }
  return impl_->config.Enabled ? loss->Multiply(impl_->state.Scale) : loss;
}

GradientMap DynamicLossScaler::UnscaleGradients(const GradientMap& gradients) {
  return UnscaleGradientsAndCheck(gradients).Gradients;
}

UnscaledGradients DynamicLossScaler::UnscaleGradientsAndCheck(const GradientMap& gradients) {
  if (!impl_->config.Enabled) {
    TensorList(gradients);  // same null check as when enabled
    return UnscaledGradients{gradients, false};
  }
  return impl_->workspace.Run(gradients, detail::InverseScale(impl_->state.Scale));
}

TensorPtr DynamicLossScaler::UnscaleGradient(const TensorPtr& gradient) {
  if (!gradient) {
    throw ArgumentNullError("gradient");
  }
  return impl_->config.Enabled ? detail::UnscaleWorkspace::RunOne(gradient, detail::InverseScale(impl_->state.Scale))
                               : gradient;
}

bool DynamicLossScaler::CheckOverflow(const GradientMap& gradients) {
  const std::vector<TensorPtr> list = TensorList(gradients);
  return impl_->config.Enabled && HasNonFinite(list);
}

bool DynamicLossScaler::CheckOverflow(const TensorPtr& gradient) {
  if (!gradient) {
    throw ArgumentNullError("gradient");
  }
  const std::vector<TensorPtr> list{gradient};
  return impl_->config.Enabled && HasNonFinite(list);
}

void DynamicLossScaler::UpdateScale(bool overflow) {
  if (impl_->config.Enabled) {
    UpdateScaleState(impl_->state, impl_->policy, overflow);
  }
}

TensorPtr DynamicLossScaler::GetScaleTensor() { return impl_->scale_tensor.Get(impl_->Factor()); }

TensorPtr DynamicLossScaler::GetInverseScaleTensor() {
  return impl_->inverse_tensor.Get(impl_->config.Enabled ? detail::InverseScale(impl_->state.Scale) : 1.0f);
}

DynamicScalerStats DynamicLossScaler::GetStats() const {
  const ScaleState& s = impl_->state;
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

void DynamicLossScaler::Reset() { impl_->state = ScaleState::Initial(impl_->policy); }

std::vector<std::byte> DynamicLossScaler::StateDict() const {
  const DynamicScalerConfig& c = impl_->config;
  mlframework::detail::BlobWriter writer(kKind, kVersion);
  writer.F32(c.InitialScale);
  writer.F32(c.GrowthFactor);
  writer.F32(c.BackoffFactor);
  writer.I64(c.GrowthInterval);
  writer.F32(c.MinScale);
  writer.F32(c.MaxScale);
  writer.I64(c.Hysteresis);
  writer.U8(c.Enabled ? 1 : 0);
  writer.ScaleStateFields(impl_->state);
  return writer.Finish();
}

void DynamicLossScaler::LoadStateDict(std::span<const std::byte> state) {
  mlframework::detail::BlobReader reader(state, kKind, kVersion);
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
  next->state = scale_state;
  impl_ = std::move(next);
}

}  // namespace mlframework::amp
