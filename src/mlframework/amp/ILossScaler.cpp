#include <mlframework/amp/ILossScaler.hpp>

#include <sstream>
#include <string>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/StateBlob.hpp"

namespace mlframework::amp {

namespace {

constexpr char kLossScalerKind[] = "amp.ILossScaler";
constexpr std::uint16_t kLossScalerVersion = 1;

std::string Describe(float scale, bool enabled) {
  std::ostringstream text;
  text << "scale " << scale << (enabled ? " (enabled)" : " (disabled)");
  return text.str();
}

}  // namespace

ILossScaler::~ILossScaler() = default;

UnscaledGradients ILossScaler::UnscaleGradientsAndCheck(const GradientMap& gradients) {
  // Check first: a user's UnscaleGradients may work in place, and the spec checks the scaled values.
  const bool overflow = CheckOverflow(gradients);
  return UnscaledGradients{UnscaleGradients(gradients), overflow};
}

GradientMap ILossScaler::UnscaleAndRecordOverflow(const GradientMap& gradients) {
  UnscaledGradients result = UnscaleGradientsAndCheck(gradients);
  recorded_overflow_ = recorded_overflow_ || result.Overflow;
  return std::move(result.Gradients);
}

void ILossScaler::MarkOverflow() { recorded_overflow_ = true; }

bool ILossScaler::RecordedOverflow() const { return recorded_overflow_; }

void ILossScaler::ClearRecordedOverflow() { recorded_overflow_ = false; }

void ILossScaler::UpdateScaleFromRecord() {
  const bool overflow = RecordedOverflow();
  UpdateScale(overflow);  // first: a throwing user policy leaves the record for a retry
  ClearRecordedOverflow();
}

bool ILossScaler::SetEnabled(bool /*enabled*/) { return false; }

bool ILossScaler::SetAmaxTracking(bool /*on*/) { return false; }

std::optional<float> ILossScaler::RecordedAmax() const { return std::nullopt; }

void ILossScaler::Reset() {}

TensorPtr ILossScaler::GetScaleTensor() { return Scalar(IsEnabled() ? CurrentScale() : 1.0f); }

std::optional<DynamicScalerStats> ILossScaler::GetStats() const { return std::nullopt; }

std::vector<std::byte> ILossScaler::StateDict() const {
  mlframework::detail::BlobWriter writer(kLossScalerKind, kLossScalerVersion);
  writer.F32(CurrentScale());
  writer.U8(IsEnabled() ? 1 : 0);
  return writer.Finish();
}

void ILossScaler::LoadStateDict(std::span<const std::byte> state) {
  mlframework::detail::BlobReader reader(state, kLossScalerKind, kLossScalerVersion);
  const float scale = reader.F32();
  const bool enabled = reader.Flag("enabled");
  reader.ExpectEnd();
  if (scale == CurrentScale() && enabled == IsEnabled()) {
    return;  // the checkpoint is the current state: nothing to restore
  }
  throw InvalidOperationError("ILossScaler::LoadStateDict(): the checkpoint holds " + Describe(scale, enabled) +
                              " but this scaler is at " + Describe(CurrentScale(), IsEnabled()) +
                              ", and its class does not override LoadStateDict(), so the interface cannot set "
                              "them. Override StateDict() and LoadStateDict() in your ILossScaler to checkpoint it.");
}

std::vector<std::byte> ILossScaler::ScaleSnapshot() const { return StateDict(); }

void ILossScaler::RestoreScaleSnapshot(std::span<const std::byte> snapshot) {
  LoadStateDict(snapshot);
  ClearRecordedOverflow();
}

}  // namespace mlframework::amp
