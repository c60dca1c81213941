#include <mlframework/amp/GradScaler.hpp>

#include <exception>
#include <optional>
#include <string>

#include <mlframework/amp/StaticLossScaler.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/ObserverList.hpp"
#include "mlframework/core/SameMemory.hpp"
#include "mlframework/core/StateBlob.hpp"

namespace mlframework::amp {

namespace {

using Phase = GradScaler::IterationState;

constexpr char kKind[] = "amp.GradScaler";
// Version 2: any ILossScaler's blob, the IterationState, found-inf and GradScaler's own switch.
// Version 1 (still read): a built-in scaler's kind byte and blob, and four iteration flags.
constexpr std::uint16_t kVersion = 2;
constexpr std::uint16_t kVersion1 = 1;

// Same names mapping to the same gradients: the same tensor objects or new ones over the same
// memory (a framework may wrap its gradients anew on every call), never equal values alone.
bool SameTensors(const GradientMap& a, const GradientMap& b) {
  if (a.size() != b.size() || a.empty()) {
    return false;
  }
  auto it = b.begin();
  for (const auto& [name, tensor] : a) {
    const TensorPtr& other = it->second;
    if (it->first != name ||
        (tensor != other && (!tensor || !other || !mlframework::detail::SameMemory(*tensor, *other)))) {
      return false;
    }
    ++it;
  }
  return true;
}

// The states that hold a found-inf result in the scaler's record.
bool HoldsRecord(Phase state) { return state == Phase::Checked || state == Phase::Unscaled || state == Phase::Stepped; }

// Opens @p state as the current version, else as version 1; a blob that is neither reports the
// current version's error.
mlframework::detail::BlobReader OpenBlob(std::span<const std::byte> state, std::uint16_t& version) {
  try {
    version = kVersion;
    return {state, kKind, kVersion};
  } catch (const ArgumentError&) {
    const std::exception_ptr current = std::current_exception();
    try {
      version = kVersion1;
      return {state, kKind, kVersion1};
    } catch (const ArgumentError&) {
      std::rethrow_exception(current);
    }
  }
}

// The iteration of a version 1 blob: found-inf 0 (none), 1 (false), 2 (true); the unscaled,
// stepped and loss-scaled flags.
Phase StateOfVersion1(mlframework::detail::BlobReader& reader, bool& found_inf) {
  const std::uint8_t found = reader.U8();
  const std::uint8_t unscaled = reader.U8();
  const std::uint8_t stepped = reader.U8();
  const std::uint8_t loss_scaled = reader.U8();
  if (found > 2 || unscaled > 1 || stepped > 1 || loss_scaled > 1 || (stepped == 1 && unscaled == 0) ||
      (unscaled == 1 && found == 0)) {
    reader.Fail("holds an inconsistent iteration state");
  }
  found_inf = found == 2;
  if (stepped == 1) {
    return Phase::Stepped;
  }
  if (unscaled == 1) {
    return Phase::Unscaled;
  }
  if (found != 0) {
    return Phase::Checked;
  }
  return loss_scaled == 1 ? Phase::LossScaled : Phase::Ready;
}

}  // namespace

struct GradScaler::Impl {
  explicit Impl(std::shared_ptr<ILossScaler> s) : scaler(std::move(s)) {}

  std::shared_ptr<ILossScaler> scaler;
  bool own_enabled = true;  // the switch in front of a scaler without one (ILossScaler::SetEnabled returned false)
  Phase state = Phase::Ready;

  GradientMap unscaled_source;  // what this iteration unscaled ...
  GradientMap unscaled_result;  // ... and the unscaled tensors handed out
  // The previous iteration's gradients and their unscaled tensors, kept until the next
  // Scale(loss), to catch double unscaling (FP16 gradients are unscaled into other tensors, so
  // either may come back).
  GradientMap previous_source;
  GradientMap previous_result;

  bool amax_tracking = false;
  bool unscaled_this_iteration = false;  // an unscale ran (enabled) in this iteration
  std::optional<float> last_amax;        // LastAmax()

  TensorPtr scale_tensor;  // GetScaleTensor cache
  float scale_tensor_value = 0.0f;

  mlframework::detail::Observers observers;
  std::int64_t steps = 0;                        // finished iterations: the next report's step index
  std::optional<OverflowReport> pending_report;  // this iteration's, built once its overflow is known
  std::optional<OverflowReport> last_overflow;   // committed when an overflowed iteration finishes

  bool Enabled() const { return own_enabled && scaler->Enabled(); }

  // True when @p gradients are the previous iteration's (the same memory), before a new Scale(loss).
  bool UnscaledBefore(const GradientMap& gradients) const {
    return SameTensors(gradients, previous_source) || SameTensors(gradients, previous_result);
  }
  void ForgetPrevious() {
    previous_source.clear();
    previous_result.clear();
  }

  void ClearIteration() {
    unscaled_this_iteration = false;
    state = Phase::Ready;
    unscaled_source.clear();
    unscaled_result.clear();
    pending_report.reset();
  }

  // Builds this iteration's report from @p checked (the gradients whose check overflowed), once:
  // always for host gradients, on a device only for observers (the scan waits for the device).
  void ReportOverflow(const GradientMap& checked) {
    if (!pending_report && (!observers.empty() || mlframework::detail::ReportCostsNoWait(checked))) {
      pending_report = OverflowReport::FromGradients(checked, steps, scaler->Scale());
    }
  }

  // The first result of an iteration takes over the scaler's record (a dropped iteration may have left one).
  void BeginRecord() {
    if (!HoldsRecord(state)) {
      scaler->ClearRecordedOverflow();
    }
  }

  // The iteration's found-inf; a device-resident record is read here, and only here.
  bool FoundInf() const { return Enabled() && scaler->RecordedOverflow(); }

  // Applies the recorded result once and returns to Ready (no synchronisation on a device
  // without observers or amax tracking). Returns what the observers are to be told, once the
  // caller is done.
  std::optional<mlframework::detail::StepNotice> Finish() {
    const bool observed = !observers.empty();
    float old_scale = 0.0f;
    if (observed) {
      old_scale = scaler->Scale();
      if (!pending_report && !unscaled_result.empty() && FoundInf()) {
        ReportOverflow(unscaled_result);  // Update() after Unscale() alone: the flag is read here
      }
    }
    if (amax_tracking) {
      // Read before the update: the record (and with it the amax) is the iteration's.
      last_amax = Enabled() && unscaled_this_iteration ? scaler->RecordedAmax() : std::nullopt;
    }
    unscaled_this_iteration = false;
    if (Enabled()) {
      scaler->UpdateScaleFromRecord();
    }
    const bool overflowed = pending_report.has_value();
    if (overflowed) {
      last_overflow = std::move(pending_report);
    }
    const std::int64_t step = steps++;
    GradientMap source = std::move(unscaled_source);
    GradientMap result = std::move(unscaled_result);
    ClearIteration();
    previous_source = std::move(source);
    previous_result = std::move(result);
    if (!observed) {
      return std::nullopt;
    }
    mlframework::detail::StepNotice notice;
    notice.Event = StepEvent{.Step = step,
                             .LossScale = old_scale,
                             .NewLossScale = scaler->Scale(),
                             .Skipped = overflowed,
                             .GradientNorm = std::nullopt,
                             .GradientAmax = last_amax,
                             .Overflow = overflowed ? &*last_overflow : nullptr};
    return notice;
  }

  void Notify(const std::optional<mlframework::detail::StepNotice>& notice) const {
    if (notice) {
      mlframework::detail::NotifyObservers(observers, *notice);
    }
  }

  // Unscales and ORs the overflow into the scaler's record (on a device: its flag, no synchronisation).
  void UnscaleAndRecord(const GradientMap& source) {
    GradientMap result;
    if (!Enabled()) {
      TensorList(source);  // the same null check as when enabled
      result = source;
    } else {
      BeginRecord();
      result = scaler->UnscaleAndRecordOverflow(source);
      unscaled_this_iteration = true;
    }
    state = Phase::Unscaled;
    unscaled_source = source;
    unscaled_result = std::move(result);
  }
};

GradScaler::GradScaler() : GradScaler(DynamicScalerConfig{}) {}

GradScaler::GradScaler(DynamicScalerConfig config)
    : impl_(std::make_unique<Impl>(std::make_shared<DynamicLossScaler>(config))) {}

GradScaler::GradScaler(std::shared_ptr<ILossScaler> scaler) {
  if (!scaler) {
    throw ArgumentNullError("scaler");
  }
  impl_ = std::make_unique<Impl>(std::move(scaler));
}

GradScaler GradScaler::Static(float scale, bool enabled) {
  return GradScaler(std::make_shared<StaticLossScaler>(scale, enabled));
}

GradScaler GradScaler::Dynamic(float initialScale, float growthFactor, float backoffFactor, int growthInterval,
                               float minScale, float maxScale, bool enabled) {
  return GradScaler(DynamicScalerConfig{.InitialScale = initialScale,
                                        .GrowthFactor = growthFactor,
                                        .BackoffFactor = backoffFactor,
                                        .GrowthInterval = growthInterval,
                                        .MinScale = minScale,
                                        .MaxScale = maxScale,
                                        .Enabled = enabled});
}

GradScaler::~GradScaler() = default;
GradScaler::GradScaler(GradScaler&& other) noexcept = default;
GradScaler& GradScaler::operator=(GradScaler&& other) noexcept = default;

const std::shared_ptr<ILossScaler>& GradScaler::Scaler() const noexcept { return impl_->scaler; }
float GradScaler::Scale() const { return impl_->scaler->Scale(); }
bool GradScaler::Enabled() const { return impl_->Enabled(); }
GradScaler::IterationState GradScaler::State() const noexcept { return impl_->state; }

TensorPtr GradScaler::Scale(const TensorPtr& loss) {
  if (!loss) {
    throw ArgumentNullError("loss");
  }
  Impl& s = *impl_;
  std::optional<mlframework::detail::StepNotice> notice;
  if (HoldsRecord(s.state)) {
    // The previous iteration recorded a result but never called Update() (spec 004's manual
    // flow skips it on overflow): apply it now, once.
    notice = s.Finish();
  }
  TensorPtr scaled = s.Enabled() ? s.scaler->ScaleLoss(loss) : loss;
  s.ForgetPrevious();  // a new loss means new gradients
  s.state = Phase::LossScaled;
  s.Notify(notice);
  return scaled;
}

GradientMap GradScaler::Unscale(const GradientMap& gradients) {
  Impl& s = *impl_;
  if (s.state == Phase::Unscaled || s.state == Phase::Stepped) {
    throw InvalidOperationError(
        "GradScaler::Unscale() was already called in this iteration; gradients are unscaled once per "
        "iteration. Call Update() (or Step()) to finish the iteration, then Scale(loss) for the next one.");
  }
  if (s.UnscaledBefore(gradients)) {
    throw InvalidOperationError(
        "GradScaler::Unscale(): these gradients were already unscaled in the previous iteration. Run backward "
        "for new gradients and call Scale(loss) before unscaling again.");
  }
  s.UnscaleAndRecord(gradients);
  return s.unscaled_result;
}

bool GradScaler::CheckOverflow(const GradientMap& gradients) {
  Impl& s = *impl_;
  TensorList(gradients);  // ArgumentNullError naming a null entry
  const bool unscaled = s.state == Phase::Unscaled || s.state == Phase::Stepped;
  if (unscaled && (SameTensors(gradients, s.unscaled_source) || SameTensors(gradients, s.unscaled_result))) {
    // The fused unscale pass already checked them and recorded the result.
    const bool found = s.FoundInf();
    if (found) {
      s.ReportOverflow(s.unscaled_result);
    }
    return found;
  }
  const bool overflow = s.Enabled() && s.scaler->CheckOverflow(gradients);
  if (overflow) {
    s.ReportOverflow(gradients);  // before any change: it may throw (a tensor that cannot be read)
  }
  s.BeginRecord();
  if (overflow) {
    s.scaler->MarkOverflow();
  }
  if (!HoldsRecord(s.state)) {
    s.state = Phase::Checked;
  }
  return overflow;
}

void GradScaler::Update() {
  Impl& s = *impl_;
  if (!HoldsRecord(s.state)) {
    throw InvalidOperationError(
        "GradScaler::Update() called with no overflow check recorded in this iteration: call Unscale(), "
        "CheckOverflow() or Step(optimizer, false) first (Step(optimizer) already updates the scale).");
  }
  s.Notify(s.Finish());
}

bool GradScaler::Step(IOptimizer& optimizer, bool optimizerStep) {
  return StepImpl(optimizer, optimizerStep, optimizerStep);
}

bool GradScaler::StepImpl(IOptimizer& optimizer, bool run_optimizer, bool update_scale) {
  Impl& s = *impl_;
  if (s.state == Phase::Stepped) {
    throw InvalidOperationError(
        "GradScaler::Step() was already called in this iteration (with optimizerStep = false): call Update() "
        "to finish the iteration before stepping again.");
  }
  const GradientMap gradients = optimizer.GetGradients();
  if (s.state == Phase::Unscaled) {
    // The clipping flow: Unscale(optimizer's gradients), clip, Step(optimizer).
    if (!SameTensors(gradients, s.unscaled_source) && !SameTensors(gradients, s.unscaled_result)) {
      throw InvalidOperationError(
          "GradScaler::Step(): Unscale() was called in this iteration on gradients that are not this "
          "optimizer's. Unscale the optimizer's own gradients (GetGradients()) or call Update() to finish "
          "the manual flow.");
    }
  } else {
    if (s.UnscaledBefore(gradients)) {
      throw InvalidOperationError(
          "GradScaler::Step() called twice on the same gradients: the previous Step() already unscaled and "
          "applied them. Run backward for new gradients and call Scale(loss) before stepping again.");
    }
    s.UnscaleAndRecord(gradients);
  }
  const GradientMap unscaled = s.unscaled_result;
  const bool overflow = s.FoundInf();  // the one read of a device flag in a step: Step must decide and return it
  if (overflow) {
    s.ReportOverflow(unscaled);
  }
  if (!overflow) {
    if (!SameTensors(unscaled, gradients)) {
      optimizer.SetGradients(unscaled);  // FP16/BF16 model gradients -> FP32 unscaled gradients
    }
    if (run_optimizer) {
      optimizer.Step();
    }
  }
  if (update_scale) {
    s.Notify(s.Finish());
  } else {
    s.state = Phase::Stepped;
  }
  return !overflow;
}

void GradScaler::AbandonIteration() noexcept {
  impl_->ClearIteration();
  impl_->ForgetPrevious();
}

void GradScaler::Enable() {
  Impl& s = *impl_;
  if (s.state != Phase::Ready) {
    throw InvalidOperationError(
        "GradScaler::Enable() called in the middle of an iteration (the loss or gradients were already "
        "scaled with the old setting): finish it with Step() or Update() first.");
  }
  s.scaler->SetEnabled(true);
  s.own_enabled = true;
}

void GradScaler::Disable() {
  Impl& s = *impl_;
  if (s.state != Phase::Ready) {
    throw InvalidOperationError(
        "GradScaler::Disable() called in the middle of an iteration (the loss or gradients were already "
        "scaled): finish it with Step() or Update() first.");
  }
  if (!s.scaler->SetEnabled(false)) {
    s.own_enabled = false;  // the scaler has no switch of its own
  }
}

void GradScaler::Reset() {
  impl_->scaler->Reset();
  AbandonIteration();
  impl_->last_overflow.reset();
  impl_->last_amax.reset();  // the amax belonged to the run before the reset
}

const std::optional<OverflowReport>& GradScaler::LastOverflow() const noexcept { return impl_->last_overflow; }

void GradScaler::AddObserver(std::shared_ptr<ITrainingObserver> observer) {
  mlframework::detail::AddObserver(impl_->observers, std::move(observer));
}

bool GradScaler::RemoveObserver(const std::shared_ptr<ITrainingObserver>& observer) {
  return mlframework::detail::RemoveObserver(impl_->observers, observer);
}

TensorPtr GradScaler::GetScaleTensor() {
  Impl& s = *impl_;
  const float factor = s.Enabled() ? s.scaler->Scale() : 1.0f;
  if (!s.scale_tensor || s.scale_tensor_value != factor) {
    // A scaler disabled by the own switch still reports its scale: the factor is 1 then.
    s.scale_tensor = s.own_enabled ? s.scaler->GetScaleTensor() : Scalar(1.0f);
    s.scale_tensor_value = factor;
  }
  return s.scale_tensor;
}

std::optional<DynamicScalerStats> GradScaler::GetStats() const { return impl_->scaler->Statistics(); }

std::vector<std::byte> GradScaler::StateDict() const {
  const Impl& s = *impl_;
  const std::vector<std::byte> inner = s.scaler->StateDict();
  mlframework::detail::BlobWriter writer(kKind, kVersion);
  writer.U64(inner.size());
  writer.Bytes(inner);
  writer.U8(static_cast<std::uint8_t>(s.state));
  writer.U8(HoldsRecord(s.state) && s.FoundInf() ? 1 : 0);
  writer.U8(s.own_enabled ? 1 : 0);
  return writer.Finish();
}

void GradScaler::LoadStateDict(std::span<const std::byte> state) {
  Impl& s = *impl_;
  std::uint16_t version = 0;
  mlframework::detail::BlobReader reader = OpenBlob(state, version);
  if (version == kVersion1) {
    // The built-in scaler's kind (0 static, 1 dynamic); its blob's own kind tag is checked by its LoadStateDict.
    if (reader.U8() > 1) {
      reader.Fail("names an unknown scaler kind");
    }
  }
  const std::uint64_t inner_size = reader.U64();
  const std::span<const std::byte> inner = reader.Bytes(static_cast<std::size_t>(inner_size));
  bool found_inf = false;
  bool own_enabled = true;
  Phase iteration = Phase::Ready;
  if (version == kVersion1) {
    iteration = StateOfVersion1(reader, found_inf);
  } else {
    const std::uint8_t stored = reader.U8();
    if (stored > static_cast<std::uint8_t>(Phase::Stepped)) {
      reader.Fail("iteration state " + std::to_string(stored) + " is not one of GradScaler::IterationState");
    }
    iteration = static_cast<Phase>(stored);
    found_inf = reader.Flag("found-inf");
    own_enabled = reader.Flag("enabled");
    if (found_inf && !HoldsRecord(iteration)) {
      reader.Fail("holds a found-inf result in an iteration state that records none");
    }
  }
  reader.ExpectEnd();
  // Everything of ours is validated; the scaler validates its blob before changing anything.
  s.scaler->LoadStateDict(inner);
  s.ClearIteration();
  s.ForgetPrevious();
  s.state = iteration;
  s.own_enabled = own_enabled;
  s.scaler->ClearRecordedOverflow();
  if (found_inf) {
    s.scaler->MarkOverflow();
  }
}

void GradScaler::SetAmaxTracking(bool on) {
  Impl& s = *impl_;
  if (!s.scaler->SetAmaxTracking(on) && on) {
    throw InvalidOperationError(
        std::string("GradScaler::SetAmaxTracking(true)") +
        ": the wrapped ILossScaler cannot track the amax (its SetAmaxTracking() returned false); override "
        "ILossScaler::SetAmaxTracking() and RecordedAmax(), or use a built-in scaler");
  }
  s.amax_tracking = on;
  s.last_amax.reset();
}

bool GradScaler::AmaxTracking() const noexcept { return impl_->amax_tracking; }

std::optional<float> GradScaler::LastAmax() const noexcept { return impl_->last_amax; }

}  // namespace mlframework::amp
