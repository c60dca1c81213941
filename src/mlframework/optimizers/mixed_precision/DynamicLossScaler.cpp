#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>

#include <string>
#include <unordered_set>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>

#include "mlframework/core/StateBlob.hpp"
#include "mlframework/optimizers/mixed_precision/CSharpFormat.hpp"

namespace mlframework::optimizers::mixed_precision {

namespace {

constexpr const char* kBlobKind = "optimizers.mixed_precision.DynamicLossScaler";
constexpr std::uint16_t kBlobVersion = 1;

// Validates before anything is stored, so a bad options object never yields a scaler.
const MixedPrecisionOptions& Validated(const MixedPrecisionOptions& options) {
  options.Validate();
  return options;
}

}  // namespace

std::string LossScalerStats::ToString() const {
  std::string text = "Scale: " + detail::FormatFixed(CurrentScale, 2) +
                     ", Steps since overflow: " + std::to_string(StepsSinceLastOverflow) +
                     ", Consecutive overflows: " + std::to_string(ConsecutiveOverflows) +
                     ", Total overflows: " + std::to_string(TotalOverflows) +
                     ", Stable: " + detail::FormatBool(IsStable);
  if (FellBackToFP32) {
    text += ", Fell back to FP32";
  }
  return text;
}

DynamicLossScaler::DynamicLossScaler(const MixedPrecisionOptions& options)
    : options_(Validated(options)), policy_(options_.ToScalePolicy()), state_(amp::ScaleState::Initial(policy_)) {}

DynamicLossScaler::DynamicLossScaler() : DynamicLossScaler(MixedPrecisionOptions::ForFP16()) {}

TensorPtr DynamicLossScaler::ScaleLoss(const TensorPtr& loss) const {
  if (!loss) {
    throw ArgumentNullError("loss");
  }
  if (!IsEnabled()) {
    return loss;
  }
  return loss->Multiply(state_.Scale);
}

GradientMap DynamicLossScaler::UnscaleGradients(const GradientMap& gradients) const {
  TensorList(gradients);  // rejects null entries before anything is written
  if (!IsEnabled()) {
    return gradients;
  }
  // The inverse in double is exact for power-of-two scales and the closest float otherwise.
  const auto inverse = static_cast<float>(1.0 / static_cast<double>(state_.Scale));
  GradientMap unscaled;
  std::vector<TensorPtr> fp32;
  std::unordered_set<const ITensor*> fp32_seen;
  std::vector<TensorPtr> low;
  std::vector<const std::string*> low_names;
  for (const auto& [name, tensor] : gradients) {
    if (tensor->GetDataType() == DataType::Float32) {
      // In place: a tensor listed under two names must still be unscaled once.
      if (fp32_seen.insert(tensor.get()).second) {
        fp32.push_back(tensor);
      }
      unscaled.emplace(name, tensor);
    } else {
      low.push_back(tensor);
      low_names.push_back(&name);
    }
  }
  // New FP32 tensors for the 16-bit gradients first: if that allocation fails, nothing was written.
  const std::vector<TensorPtr> widened = Cast(low, DataType::Float32, inverse);
  UnscaleAndCheck(fp32, inverse);  // in place, one pass; the flag is CheckOverflow's business
  for (std::size_t i = 0; i < widened.size(); ++i) {
    unscaled.emplace(*low_names[i], widened[i]);
  }
  return unscaled;
}

bool DynamicLossScaler::CheckOverflow(const GradientMap& gradients) const {
  const std::vector<TensorPtr> all = TensorList(gradients);
  if (!IsEnabled()) {
    return false;
  }
  return HasNonFinite(all);
}

bool DynamicLossScaler::UpdateScale(bool hadOverflow) {
  if (!IsEnabled()) {
    return false;
  }
  return amp::UpdateScaleState(state_, policy_, hadOverflow);
}

bool DynamicLossScaler::CheckOverflowAndUpdate(const GradientMap& gradients) {
  const bool overflow = CheckOverflow(gradients);
  return UpdateScale(overflow);
}

void DynamicLossScaler::Reset() {
  state_ = amp::ScaleState::Initial(policy_);
  if (stopped_) {
    state_.Scale = 1.0f;
  }
}

LossScalerStats DynamicLossScaler::GetStats() const {
  return LossScalerStats{.CurrentScale = state_.Scale,
                         .StepsSinceLastOverflow = state_.StepsSinceLastOverflow,
                         .ConsecutiveOverflows = state_.ConsecutiveOverflows,
                         .TotalOverflows = state_.TotalOverflows,
                         .GrowthInterval = options_.GrowthInterval,
                         .MaxConsecutiveOverflows = options_.MaxConsecutiveOverflows,
                         .IsStable = IsStable(),
                         .FellBackToFP32 = stopped_};
}

void DynamicLossScaler::StopScaling() noexcept {
  stopped_ = true;
  state_.Scale = 1.0f;
}

std::vector<std::byte> DynamicLossScaler::StateDict() const {
  mlframework::detail::BlobWriter writer(kBlobKind, kBlobVersion);
  writer.ScaleStateFields(state_);
  writer.U8(stopped_ ? 1 : 0);
  return writer.Finish();
}

void DynamicLossScaler::LoadStateDict(std::span<const std::byte> state) {
  mlframework::detail::BlobReader reader(state, kBlobKind, kBlobVersion, "state");
  const amp::ScaleState loaded = reader.ScaleStateFields();
  const std::uint8_t stopped = reader.U8();
  reader.ExpectEnd();
  if (stopped > 1) {
    reader.Fail("stored fallback flag " + std::to_string(stopped) + " is not 0 or 1");
  }
  if (stopped == 1 && loaded.Scale != 1.0f) {
    reader.Fail("stored scale " + std::to_string(loaded.Scale) + " after a fallback to FP32 must be 1");
  }
  if (stopped == 0 && (loaded.Scale < policy_.MinScale || loaded.Scale > policy_.MaxScale)) {
    reader.Fail("stored scale " + std::to_string(loaded.Scale) + " is outside [MinLossScale, MaxLossScale] = [" +
                std::to_string(policy_.MinScale) + ", " + std::to_string(policy_.MaxScale) + "]");
  }
  // Commit only after every check passed.
  state_ = loaded;
  stopped_ = stopped == 1;
}

}  // namespace mlframework::optimizers::mixed_precision
