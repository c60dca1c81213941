#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>

#include <limits>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>

#include "mlframework/core/ScaleStateOwner.hpp"
#include "mlframework/core/StateBlob.hpp"
#include "mlframework/core/Validation.hpp"
#include "mlframework/optimizers/mixed_precision/CSharpFormat.hpp"

namespace mlframework::optimizers::mixed_precision {

namespace {

constexpr const char* kDynamicKind = "optimizers.mixed_precision.DynamicLossScaler";
// Version 2 adds PyTorch's configuration fields (GrowthFactor, BackoffFactor, GrowthInterval).
constexpr std::uint16_t kDynamicVersion = 2;
constexpr std::uint16_t kDynamicVersion1 = 1;

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
    : options_((options.Validate(), options)),
      policy_(options_.ToScalePolicy()),
      owner_(std::make_unique<mlframework::detail::ScaleStateOwner>(policy_, ScaleState::Initial(policy_))) {}

DynamicLossScaler::DynamicLossScaler() : DynamicLossScaler(MixedPrecisionOptions::ForFP16()) {}

DynamicLossScaler::~DynamicLossScaler() = default;

DynamicLossScaler::DynamicLossScaler(const DynamicLossScaler& other)
    : options_(other.options_),
      policy_(other.policy_),
      owner_(std::make_unique<mlframework::detail::ScaleStateOwner>(*other.owner_)),
      stopped_(other.stopped_) {}

DynamicLossScaler& DynamicLossScaler::operator=(const DynamicLossScaler& other) {
  if (this != &other) {
    auto owner = std::make_unique<mlframework::detail::ScaleStateOwner>(*other.owner_);
    options_ = other.options_;
    policy_ = other.policy_;
    owner_ = std::move(owner);
    stopped_ = other.stopped_;
  }
  return *this;
}

float DynamicLossScaler::CurrentScale() const { return owner_->Read().Scale; }
std::int64_t DynamicLossScaler::ConsecutiveOverflows() const { return owner_->Read().ConsecutiveOverflows; }
std::int64_t DynamicLossScaler::StepsSinceLastOverflow() const { return owner_->Read().StepsSinceLastOverflow; }
std::int64_t DynamicLossScaler::TotalOverflows() const { return owner_->Read().TotalOverflows; }
bool DynamicLossScaler::IsStable() const { return ConsecutiveOverflows() < options_.MaxConsecutiveOverflows; }
ScaleState DynamicLossScaler::State() const { return owner_->Read(); }
DeviceScaleState* DynamicLossScaler::DeviceState() const noexcept { return owner_->DeviceState(); }

TensorPtr DynamicLossScaler::ScaleLoss(const TensorPtr& loss) const {
  if (!loss) {
    throw ArgumentNullError("loss");
  }
  if (!IsEnabled()) {
    return loss;
  }
  return owner_->ScaleLoss(loss);
}

GradientMap DynamicLossScaler::UnscaleGradients(const GradientMap& gradients) const {
  const std::vector<TensorPtr> list =
      mlframework::detail::LossScalingList(gradients);  // rejects null entries before anything is written
  if (!IsEnabled()) {
    return gradients;
  }
  owner_->Place(list, "gradients");
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
  const std::vector<TensorPtr> widened = Float32OutputsLike(low);
  // The flag these kernels set is replaced by the next UpdateScale(bool) decision, or joins the
  // record that UpdateScaleFromRecord() consumes; nothing here waits for a device.
  owner_->Unscale(fp32, low, widened);
  for (std::size_t i = 0; i < widened.size(); ++i) {
    unscaled.emplace(*low_names[i], widened[i]);
  }
  return unscaled;
}

bool DynamicLossScaler::CheckOverflow(const GradientMap& gradients) const {
  const std::vector<TensorPtr> all = mlframework::detail::LossScalingList(gradients);
  if (!IsChecking()) {
    return false;
  }
  owner_->Place(all, "gradients");
  // This call's own answer; the record of the step is kept around it.
  return owner_->OwnResult([&] { owner_->Check(all); });
}

void DynamicLossScaler::RecordOverflow(const GradientMap& gradients) const {
  const std::vector<TensorPtr> all = mlframework::detail::LossScalingList(gradients);
  if (IsChecking()) {
    RecordOverflow(all);
  }
}

void DynamicLossScaler::RecordOverflow(std::span<const TensorPtr> tensors) const {
  mlframework::detail::RequireLossScalable(tensors, "tensors");
  if (!IsChecking()) {
    return;
  }
  owner_->Place(tensors, "gradients");
  owner_->Check(tensors);
}

void DynamicLossScaler::UnscaleAndRecordOverflow(std::span<const TensorPtr> in_place, std::span<const TensorPtr> src,
                                                 std::span<const TensorPtr> dst) const {
  mlframework::detail::RequireLossScalable(in_place, "in_place");
  mlframework::detail::RequireLossScalable(src, "src");
  owner_->Place(in_place, "in_place");
  owner_->Place(src, "src");
  owner_->Unscale(in_place, src, dst);
}

void DynamicLossScaler::ClearRecordedOverflow() const {
  owner_->ClearRecord();
  owner_->ClearAmax();
}

void DynamicLossScaler::SetAmaxTracking(bool on) const { owner_->SetAmaxTracking(on); }

std::optional<float> DynamicLossScaler::RecordedAmax() const {
  return owner_->AmaxTracking() ? std::optional<float>(owner_->Amax()) : std::nullopt;
}

void DynamicLossScaler::MoveStateTo(std::span<const TensorPtr> gradients) const {
  owner_->Place(gradients, "gradients");
}

bool DynamicLossScaler::UpdateScale(bool hadOverflow) {
  if (!IsChecking()) {
    return false;
  }
  if (stopped_) {
    // After the fallback the scale stays 1, yet the step is still counted and an overflowed one
    // still skipped: the shared rules would back the scale off or grow it, so count by hand.
    ScaleState state = owner_->Read();
    ++state.TotalSteps;
    if (hadOverflow) {
      ++state.TotalOverflows;
      ++state.ConsecutiveOverflows;
      state.StepsSinceLastOverflow = 0;
    } else {
      state.ConsecutiveOverflows = 0;
      ++state.StepsSinceLastOverflow;
    }
    owner_->Write(state);
    return hadOverflow;
  }
  owner_->Update(hadOverflow);
  return hadOverflow;  // UpdateScaleState skips exactly the overflowed steps
}

void DynamicLossScaler::UpdateScaleFromRecord() {
  if (!IsChecking()) {
    owner_->ClearRecord();
    return;
  }
  if (stopped_) {
    UpdateScale(owner_->Recorded());  // Write() clears the record
    return;
  }
  owner_->UpdateFromRecord();
}

bool DynamicLossScaler::CheckOverflowAndUpdate(const GradientMap& gradients) {
  const std::vector<TensorPtr> all = mlframework::detail::LossScalingList(gradients);
  if (!IsChecking()) {
    return false;
  }
  owner_->Place(all, "gradients");
  owner_->ClearRecord();
  owner_->Check(all);
  UpdateScaleFromRecord();
  // An overflowed step leaves ConsecutiveOverflows >= 1, a clean one 0 (after a fallback too):
  // one read, cached for the accessors.
  return owner_->Read().ConsecutiveOverflows > 0;
}

void DynamicLossScaler::Reset() {
  ScaleState initial = ScaleState::Initial(policy_);
  if (stopped_) {
    initial.Scale = 1.0f;
  }
  owner_->Write(initial);
}

LossScalerStats DynamicLossScaler::GetStats() const {
  const ScaleState state = owner_->Read();
  return LossScalerStats{.CurrentScale = state.Scale,
                         .StepsSinceLastOverflow = state.StepsSinceLastOverflow,
                         .ConsecutiveOverflows = state.ConsecutiveOverflows,
                         .TotalOverflows = state.TotalOverflows,
                         .GrowthInterval = options_.GrowthInterval,
                         .MaxConsecutiveOverflows = options_.MaxConsecutiveOverflows,
                         .IsStable = state.ConsecutiveOverflows < options_.MaxConsecutiveOverflows,
                         .FellBackToFP32 = stopped_};
}

void DynamicLossScaler::StopScaling() {
  ScaleState state = owner_->Read();
  state.Scale = 1.0f;
  owner_->Write(state);  // first: if a device write fails, the scaler has not stopped
  stopped_ = true;
}

std::vector<std::byte> DynamicLossScaler::StateDict() const {
  mlframework::detail::BlobWriter writer(kDynamicKind, kDynamicVersion);
  writer.ScaleStateFields(owner_->Read());
  writer.U8(stopped_ ? 1 : 0);
  writer.F32(options_.GrowthFactor);
  writer.F32(options_.BackoffFactor);
  writer.I64(options_.GrowthInterval);
  return writer.Finish();
}

void DynamicLossScaler::LoadStateDict(std::span<const std::byte> state) {
  std::uint16_t version = 0;
  mlframework::detail::BlobReader reader =
      mlframework::detail::OpenBlobVersion(state, kDynamicKind, {kDynamicVersion, kDynamicVersion1}, version);
  const ScaleState loaded = reader.ScaleStateFields();
  const std::uint8_t stopped = reader.U8();
  // The blob's configuration wins, as in PyTorch's GradScaler.load_state_dict (a version 1 blob
  // holds none: the scaler keeps its own).
  MixedPrecisionOptions options = options_;
  if (version == kDynamicVersion) {
    options.GrowthFactor = reader.F32();
    options.BackoffFactor = reader.F32();
    const std::int64_t interval = reader.I64();
    if (interval < 1 || interval > std::numeric_limits<int>::max()) {
      reader.Fail("stored GrowthInterval " + std::to_string(interval) + " is out of range");
    }
    options.GrowthInterval = static_cast<int>(interval);
    try {
      options.Validate();
    } catch (const ArgumentError& error) {
      reader.Fail(std::string("holds an invalid configuration: ") + error.what());
    }
  }
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
  // Commit only after every check passed; a new owner takes the blob's policy (amax tracking kept).
  const ScalePolicy policy = options.ToScalePolicy();
  auto owner = std::make_unique<mlframework::detail::ScaleStateOwner>(policy, loaded);
  owner->SetAmaxTracking(owner_->AmaxTracking());
  options_ = options;
  policy_ = policy;
  owner_ = std::move(owner);
  stopped_ = stopped == 1;
}

}  // namespace mlframework::optimizers::mixed_precision
