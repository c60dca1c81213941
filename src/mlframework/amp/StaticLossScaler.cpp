#include <mlframework/amp/StaticLossScaler.hpp>

#include <algorithm>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/amp/UnscaleWorkspace.hpp"
#include "mlframework/core/StateBlob.hpp"
#include "mlframework/core/Validation.hpp"

namespace mlframework::amp {

namespace {
constexpr char kStaticKind[] = "amp.StaticLossScaler";
constexpr std::uint16_t kStaticVersion = 1;
}  // namespace

struct StaticLossScaler::Impl {
  Impl(float s, bool e) : scale(s), inverse(detail::InverseScale(s)), enabled(e) {}
  float scale;
  float inverse;
  bool enabled;
  // Cached scalars (spec 001: cache scale and inverse scale), built on first use.
  detail::CachedScalar scale_tensor;
  detail::CachedScalar inverse_tensor;
  detail::UnscaleWorkspace workspace;
  bool track_amax = false;
  float amax = 0.0f;  // since the record was cleared
};

StaticLossScaler::StaticLossScaler(float scale, bool enabled) {
  detail::RequireScale(scale, "scale");
  impl_ = std::make_unique<Impl>(scale, enabled);
}

StaticLossScaler::~StaticLossScaler() = default;

StaticLossScaler::StaticLossScaler(const StaticLossScaler& other)
    : ILossScaler(other), impl_(std::make_unique<Impl>(other.impl_->scale, other.impl_->enabled)) {
  impl_->track_amax = other.impl_->track_amax;  // tracking is configuration, like the dynamic scaler's copy
}

StaticLossScaler& StaticLossScaler::operator=(const StaticLossScaler& other) {
  if (this != &other) {
    ILossScaler::operator=(other);  // the found-inf record (ILossScaler's default, which this scaler keeps)
    impl_ = std::make_unique<Impl>(other.impl_->scale, other.impl_->enabled);
    impl_->track_amax = other.impl_->track_amax;
  }
  return *this;
}

float StaticLossScaler::CurrentScale() const { return impl_->scale; }
bool StaticLossScaler::IsEnabled() const { return impl_->enabled; }
bool StaticLossScaler::SetEnabled(bool enabled) {
  impl_->enabled = enabled;
  return true;
}

bool StaticLossScaler::SetAmaxTracking(bool on) {
  impl_->track_amax = on;
  impl_->amax = 0.0f;
  return true;
}

std::optional<float> StaticLossScaler::RecordedAmax() const {
  return impl_->track_amax ? std::optional<float>(impl_->amax) : std::nullopt;
}

void StaticLossScaler::ClearRecordedOverflow() {
  ILossScaler::ClearRecordedOverflow();
  impl_->amax = 0.0f;
}

TensorPtr StaticLossScaler::ScaleLoss(const TensorPtr& loss) {
  if (!loss) {
    throw ArgumentNullError("loss");
  }
  TensorPtr scaled = impl_->enabled ? loss->Multiply(impl_->scale) : loss;
  impl_->workspace.BeginStep();  // a new loss: the last step's unscaled gradients may be written again
  return scaled;
}

GradientMap StaticLossScaler::UnscaleGradients(const GradientMap& gradients) {
  return UnscaleGradientsAndCheck(gradients).Gradients;
}

UnscaledGradients StaticLossScaler::UnscaleGradientsAndCheck(const GradientMap& gradients) {
  if (!impl_->enabled) {
    mlframework::detail::LossScalingList(gradients);  // same null check as when enabled
    return UnscaledGradients{gradients, false};
  }
  if (!impl_->track_amax) {
    return impl_->workspace.Run(gradients, impl_->inverse);
  }
  float amax = 0.0f;
  UnscaledGradients result = impl_->workspace.Run(gradients, impl_->inverse, &amax);
  impl_->amax = std::max(impl_->amax, amax);
  return result;
}

TensorPtr StaticLossScaler::UnscaleGradient(const TensorPtr& gradient) {
  mlframework::detail::RequireLossScalable(gradient, "gradient");
  return impl_->enabled ? detail::UnscaleWorkspace::RunOne(gradient, impl_->inverse) : gradient;
}

bool StaticLossScaler::CheckOverflow(const GradientMap& gradients) {
  const std::vector<TensorPtr> list = mlframework::detail::LossScalingList(gradients);
  return impl_->enabled && HasNonFinite(list);
}

bool StaticLossScaler::CheckOverflow(const TensorPtr& gradient) {
  mlframework::detail::RequireLossScalable(gradient, "gradient");
  const std::vector<TensorPtr> list{gradient};
  return impl_->enabled && HasNonFinite(list);
}

void StaticLossScaler::UpdateScale(bool /*overflow*/) {}

TensorPtr StaticLossScaler::GetScaleTensor() { return impl_->scale_tensor.Get(impl_->enabled ? impl_->scale : 1.0f); }

TensorPtr StaticLossScaler::GetInverseScaleTensor() {
  return impl_->inverse_tensor.Get(impl_->enabled ? impl_->inverse : 1.0f);
}

std::vector<std::byte> StaticLossScaler::StateDict() const {
  mlframework::detail::BlobWriter writer(kStaticKind, kStaticVersion);
  writer.F32(impl_->scale);
  writer.U8(impl_->enabled ? 1 : 0);
  return writer.Finish();
}

void StaticLossScaler::LoadStateDict(std::span<const std::byte> state) {
  mlframework::detail::BlobReader reader(state, kStaticKind, kStaticVersion);
  const float scale = reader.F32();
  const std::uint8_t enabled = reader.U8();
  reader.ExpectEnd();
  if (enabled > 1) {
    reader.Fail("enabled flag " + std::to_string(enabled) + " is not 0 or 1");
  }
  try {
    detail::RequireScale(scale, "scale");
  } catch (const ArgumentError& error) {
    reader.Fail(std::string("holds an invalid scale: ") + error.what());
  }
  auto next = std::make_unique<Impl>(scale, enabled == 1);
  next->track_amax = impl_->track_amax;  // a setting of this scaler, not in the blob
  impl_ = std::move(next);
}

}  // namespace mlframework::amp
