#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>

#include <string>
#include <unordered_set>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>

#include "mlframework/amp/ScaleStateOwner.hpp"
#include "mlframework/amp/UnscaleWorkspace.hpp"
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
    : options_(Validated(options)),
      policy_(options_.ToScalePolicy()),
      owner_(std::make_unique<amp::detail::ScaleStateOwner>(policy_, amp::ScaleState::Initial(policy_))) {}

DynamicLossScaler::DynamicLossScaler() : DynamicLossScaler(MixedPrecisionOptions::ForFP16()) {}

DynamicLossScaler::~DynamicLossScaler() = default;

DynamicLossScaler::DynamicLossScaler(const DynamicLossScaler& other)
    : options_(other.options_),
      policy_(other.policy_),
      owner_(std::make_unique<amp::detail::ScaleStateOwner>(*other.owner_)),
      stopped_(other.stopped_) {}

DynamicLossScaler& DynamicLossScaler::operator=(const DynamicLossScaler& other) {
  if (this != &other) {
    auto owner = std::make_unique<amp::detail::ScaleStateOwner>(*other.owner_);
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
amp::ScaleState DynamicLossScaler::State() const { return owner_->Read(); }
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
  const std::vector<TensorPtr> list = TensorList(gradients);  // rejects null entries before anything is written
  if (!IsEnabled()) {
    return gradients;
  }
  const DeviceScalingBackend* backend = owner_->Route(list, "gradients");
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
  if (backend != nullptr) {
    // On the device: the inverse scale is read there; the flag these kernels set is replaced
    // by the next UpdateScale(bool) decision, so nothing here waits for the device.
    std::vector<TensorPtr> widened;
    std::vector<const ITensor*> src;
    std::vector<ITensor*> dst;
    widened.reserve(low.size());
    src.reserve(low.size());
    dst.reserve(low.size());
    for (const TensorPtr& tensor : low) {
      widened.push_back(tensor->CastTo(DataType::Float32));  // same backend; overwritten below
      src.push_back(tensor.get());
      dst.push_back(widened.back().get());
    }
    std::vector<ITensor*> in_place;
    in_place.reserve(fp32.size());
    for (const TensorPtr& tensor : fp32) {
      in_place.push_back(tensor.get());
    }
    if (!src.empty()) {
      backend->CastUnscaledWithState(src, dst, *owner_->DeviceState());
    }
    if (!in_place.empty()) {
      backend->UnscaleWithState(in_place, *owner_->DeviceState());
    }
    owner_->NoteDeviceRecord();
    for (std::size_t i = 0; i < widened.size(); ++i) {
      unscaled.emplace(*low_names[i], widened[i]);
    }
    return unscaled;
  }
  // The inverse in double is exact for power-of-two scales and the closest float otherwise.
  const float inverse = amp::detail::InverseScale(owner_->Read().Scale);
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
  if (!IsChecking()) {
    return false;
  }
  if (owner_->Route(all, "gradients") == nullptr) {
    return HasNonFinite(all);
  }
  // This call's own answer: the flag is cleared first (the record is the next update's input only
  // through UpdateScaleFromRecord, which this front-end's callers pair with RecordOverflow).
  owner_->ClearRecord();
  RecordOverflow(gradients);
  return owner_->Recorded();
}

void DynamicLossScaler::RecordOverflow(const GradientMap& gradients) const {
  const std::vector<TensorPtr> all = TensorList(gradients);
  if (!IsChecking()) {
    return;
  }
  const DeviceScalingBackend* backend = owner_->Route(all, "gradients");
  if (backend == nullptr) {
    owner_->Record(HasNonFinite(all));
    return;
  }
  std::vector<const ITensor*> raw;
  raw.reserve(all.size());
  for (const TensorPtr& tensor : all) {
    raw.push_back(tensor.get());
  }
  backend->CheckWithState(raw, *owner_->DeviceState());
  owner_->NoteDeviceRecord();
}

bool DynamicLossScaler::UpdateScale(bool hadOverflow) {
  if (!IsChecking()) {
    return false;
  }
  if (stopped_) {
    // After the fallback the scale stays 1, yet the step is still counted and an overflowed one
    // still skipped: the shared rules would back the scale off or grow it, so count by hand.
    amp::ScaleState state = owner_->Read();
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
  const std::vector<TensorPtr> all = TensorList(gradients);
  if (!IsChecking()) {
    return false;
  }
  if (stopped_ || owner_->Route(all, "gradients") == nullptr) {
    return UpdateScale(HasNonFinite(all));
  }
  owner_->ClearRecord();
  RecordOverflow(gradients);
  UpdateScaleFromRecord();
  // An overflowed step leaves ConsecutiveOverflows >= 1, a clean one 0: one (cached) read.
  return owner_->Read().ConsecutiveOverflows > 0;
}

void DynamicLossScaler::Reset() {
  amp::ScaleState initial = amp::ScaleState::Initial(policy_);
  if (stopped_) {
    initial.Scale = 1.0f;
  }
  owner_->Write(initial);
}

LossScalerStats DynamicLossScaler::GetStats() const {
  const amp::ScaleState state = owner_->Read();
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
  amp::ScaleState state = owner_->Read();
  state.Scale = 1.0f;
  owner_->Write(state);  // first: if a device write fails, the scaler has not stopped
  stopped_ = true;
}

std::vector<std::byte> DynamicLossScaler::StateDict() const {
  mlframework::detail::BlobWriter writer(kBlobKind, kBlobVersion);
  writer.ScaleStateFields(owner_->Read());
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
  owner_->Write(loaded);
  stopped_ = stopped == 1;
}

}  // namespace mlframework::optimizers::mixed_precision
