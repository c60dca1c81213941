#include <mlframework/amp/GradScaler.hpp>

#include <algorithm>
#include <optional>
#include <string>

#include <mlframework/amp/StaticLossScaler.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/ObserverList.hpp"
#include "mlframework/core/SameMemory.hpp"
#include "mlframework/core/StateBlob.hpp"
#include "mlframework/core/Validation.hpp"

namespace mlframework::amp {

namespace {

using Phase = GradScaler::IterationState;

constexpr char kGradScalerKind[] = "amp.GradScaler";
// Version 3: version 2 and the step index.
// Version 2 (still read): any ILossScaler's blob, the IterationState, found-inf and GradScaler's own switch.
// Version 1 (still read): a built-in scaler's kind byte and blob, and four iteration flags.
constexpr std::uint16_t kGradScalerVersion = 3;
constexpr std::uint16_t kGradScalerVersion2 = 2;
constexpr std::uint16_t kGradScalerVersion1 = 1;

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

// The gradients of one optimizer (or one Unscale(gradients) call) unscaled in this iteration:
// PyTorch's per-optimizer OptState (UNSCALED, or STEPPED when `stepped`) and found-inf.
struct UnscaledGroup {
  GradientMap source;                     // the gradients as given ...
  GradientMap result;                     // ... and their unscaled tensors, handed out
  const IOptimizer* optimizer = nullptr;  // whose they are; null for Unscale(gradients) until a Step claims them
  bool stepped = false;                   // Step() ran for them
  std::optional<bool> found;              // their found-inf, once read on the host

  bool Holds(const GradientMap& gradients) const {
    return SameTensors(gradients, source) || SameTensors(gradients, result);
  }
  // Whether an unscale (while enabled) changed some of the given tensors themselves (FP32, in place).
  bool InPlace() const {
    return std::any_of(source.begin(), source.end(), [&](const auto& entry) {
      const auto it = result.find(entry.first);
      return it != result.end() && it->second == entry.second;
    });
  }
};

// ArgumentError naming the first FP8 gradient: loss scaling takes FP32, FP16 and BF16 gradients.
void RefuseFloat8(const GradientMap& gradients) {
  for (const auto& [name, tensor] : gradients) {
    if (tensor) {
      mlframework::detail::RequireLossScalableGradient(*tensor, name);
    }
  }
}

std::optional<float> MaxOf(std::optional<float> a, std::optional<float> b) {
  if (!a) {
    return b;
  }
  return b ? std::max(*a, *b) : a;
}

}  // namespace

struct GradScaler::Impl {
  explicit Impl(std::shared_ptr<ILossScaler> s) : scaler(std::move(s)) {}

  std::shared_ptr<ILossScaler> scaler;
  bool own_enabled = true;  // the switch in front of a scaler without one (ILossScaler::SetEnabled returned false)
  Phase state = Phase::Ready;

  // This iteration's unscaled gradients, one group per optimizer (or Unscale(gradients) call).
  std::vector<UnscaledGroup> groups;
  // The record (the scaler's found-inf) holds the found-inf of the last group whose result was
  // not read yet and the checks; when another group is unscaled, the record is read into the
  // groups and these host values first (CarryRecord), so each optimizer keeps its own.
  bool carried_found = false;         // the record's earlier contents, ORed into the update
  std::optional<float> carried_amax;  // and their amax
  bool checked_found = false;         // CheckOverflow() found Inf/NaN in gradients of no group
  // The previous iteration's groups, kept until the next Scale(loss), to catch double
  // unscaling (FP16 gradients are unscaled into other tensors, so either may come back).
  std::vector<UnscaledGroup> previous;
  // Gradients unscaled in place by a Step() whose optimizer threw (rolled back, but their values
  // are unscaled): refused until the next Scale(loss).
  std::vector<UnscaledGroup> spoiled;

  // An iteration that Step(optimizer) finished: what a further optimizer of the same iteration
  // (no Scale(loss) between) needs to join it (Reopen()).
  struct Finished {
    std::vector<std::byte> before_update;  // the scaler's ScaleSnapshot() before the update (empty: disabled)
    bool found = false;                    // the found-inf the update used
    std::optional<float> amax;
    bool amax_tracked = false;  // amax tracking was on: `amax` covers the iteration's gradients
    std::int64_t step = 0;
    bool overflowed = false;  // its overflow report was committed
    // The call that ended the iteration or replaced its scale state or switch since (Update(),
    // LoadStateDict(), Reset(), Enable(), Disable()), or null: the optimizers that have not
    // stepped yet hold gradients scaled with the iteration's scale and switch, which are gone,
    // so none may join.
    const char* closed_by = nullptr;
    // Update() ran since: the iteration stays only to refuse a further optimizer (another
    // Update() has nothing to finish; Unscale(gradients) and CheckOverflow() start a new one).
    bool updated = false;
  };
  std::optional<Finished> finished;
  std::optional<bool> reopened_overflowed;   // set while a reopened iteration runs: the first finish's report
  std::optional<std::int64_t> resume_steps;  // set while a reopened iteration runs: the step index after it

  bool amax_tracking = false;
  bool unscaled_this_iteration = false;  // an unscale ran (enabled) in this iteration
  bool amax_partial = false;             // a reopened iteration whose first finish was not tracked
  std::optional<float> last_amax;        // LastAmax()

  TensorPtr scale_tensor;  // GetScaleTensor cache
  float scale_tensor_value = 0.0f;

  mlframework::detail::Observers observers;
  std::int64_t steps = 0;                        // finished iterations: the next report's step index
  std::vector<std::string> gradient_order;       // SetGradientOrder(): the reports' order
  std::optional<OverflowReport> pending_report;  // this iteration's, built once its overflow is known
  std::optional<OverflowReport> last_overflow;   // committed when an overflowed iteration finishes

  bool IsEnabled() const { return own_enabled && scaler->IsEnabled(); }

  // The group of this iteration that @p optimizer stepped or claimed, or that holds @p gradients.
  UnscaledGroup* FindGroup(const IOptimizer* optimizer, const GradientMap& gradients) {
    for (UnscaledGroup& group : groups) {
      if ((optimizer != nullptr && group.optimizer == optimizer) || group.Holds(gradients)) {
        return &group;
      }
    }
    return nullptr;
  }
  bool HasUnclaimedGroup() const {
    return std::any_of(groups.begin(), groups.end(), [](const UnscaledGroup& g) { return g.optimizer == nullptr; });
  }
  // True when @p gradients are the previous iteration's (the same memory), before a new Scale(loss).
  bool UnscaledBefore(const GradientMap& gradients) const {
    return std::any_of(previous.begin(), previous.end(), [&](const UnscaledGroup& g) { return g.Holds(gradients); });
  }
  bool Spoiled(const GradientMap& gradients) const {
    return std::any_of(spoiled.begin(), spoiled.end(), [&](const UnscaledGroup& g) { return g.Holds(gradients); });
  }
  bool UnsteppedBefore(const IOptimizer* optimizer, const GradientMap& gradients) const {
    return std::any_of(previous.begin(), previous.end(), [&](const UnscaledGroup& g) {
      return !g.stepped && (g.optimizer == optimizer || g.Holds(gradients));
    });
  }
  bool SteppedBefore(const IOptimizer* optimizer) const {
    return std::any_of(previous.begin(), previous.end(),
                       [&](const UnscaledGroup& g) { return g.stepped && g.optimizer == optimizer; });
  }
  // Whether Step(optimizer) with @p gradients would join the iteration Step() finished: another
  // optimizer than those that stepped, its gradients new or unscaled for it before that Step().
  bool WouldJoin(const IOptimizer* optimizer, const GradientMap& gradients) const {
    return finished.has_value() && !SteppedBefore(optimizer) &&
           (!UnscaledBefore(gradients) || UnsteppedBefore(optimizer, gradients));
  }
  // After Enable()/Disable() (@p call): an iteration Step(o1) finished stays finished (the trailing
  // Update() is accepted); when the switch flipped, no further optimizer may join it.
  void CloseFinishedIfSwitched(bool was_enabled, const char* call) {
    if (finished && IsEnabled() != was_enabled) {
      finished->closed_by = call;
    }
  }
  // Drops the iteration when @p call (Reset(), LoadStateDict()) replaced the scale state. The
  // gradients in memory stay as they are: those this iteration unscaled in place or stepped, and
  // those the previous iteration stepped, would be unscaled (or stepped) twice if stepped again,
  // so they stay refused until the next Scale(loss). With @p close, an iteration an optimizer
  // stepped in (Step(o1) finished it, or deferred its update) stays, closed: the other
  // optimizers' gradients were scaled with the replaced scale, so none may join it, and the
  // trailing Update() is accepted and changes nothing.
  void DropIteration(const char* call, bool close) {
    std::vector<UnscaledGroup> kept = std::move(previous);
    std::vector<UnscaledGroup> refused = std::move(spoiled);
    std::optional<Finished> closed;
    if (close) {
      closed = std::move(finished);
    }
    for (const UnscaledGroup& group : groups) {
      // Stepped ones (a deferring Step(opt)) would be stepped twice, the optimizer holding their
      // unscaled FP32 copies; InPlace() means something only for an unscale that ran enabled.
      if (group.stepped || (unscaled_this_iteration && group.InPlace())) {
        refused.push_back(group);
      }
    }
    const bool stepped = std::any_of(groups.begin(), groups.end(), [](const UnscaledGroup& g) { return g.stepped; });
    if (close && stepped) {
      closed = Finished{};  // its optimizers in `previous`: the ones that stepped start the next
      kept = std::move(groups);
    }
    if (closed) {
      closed->closed_by = call;
    }
    ClearIteration();
    ForgetPrevious();
    previous = std::move(kept);
    spoiled = std::move(refused);
    finished = std::move(closed);
  }
  // InvalidOperationError from @p member when an iteration closed by a call (Reset() after a
  // deferring Step(o1), say) refuses it: the message names that call, since no step may have
  // updated the scale.
  void RefuseInClosedIteration(const char* member) const {
    if (finished && finished->closed_by != nullptr) {
      throw InvalidOperationError(std::string("GradScaler::") + member +
                                  ": an optimizer stepped in this iteration and " + finished->closed_by +
                                  " then ended it or replaced its scale state or switch, so these gradients, scaled "
                                  "with the iteration's scale, can no longer be unscaled or checked for it. Call "
                                  "Scale(loss) and run backward for the next iteration.");
    }
  }
  void ForgetPrevious() {
    previous.clear();
    spoiled.clear();
    finished.reset();
  }

  void ClearIteration() {
    unscaled_this_iteration = false;
    amax_partial = false;
    state = Phase::Ready;
    groups.clear();
    carried_found = false;
    carried_amax.reset();
    checked_found = false;
    pending_report.reset();
    reopened_overflowed.reset();
    resume_steps.reset();
  }

  // Builds this iteration's report from @p checked (the gradients whose check overflowed), once:
  // always for host gradients, on a device only for observers (the scan waits for the device).
  void ReportOverflow(const GradientMap& checked) {
    if (!pending_report && (!observers.empty() || mlframework::detail::ReportCostsNoWait(checked))) {
      pending_report = OverflowReport::FromGradients(checked, steps, scaler->CurrentScale());
      pending_report->OrderBy(gradient_order);
    }
  }

  // The first result of an iteration takes over the scaler's record (a dropped iteration may have left one).
  void BeginRecord() {
    if (!HoldsRecord(state)) {
      scaler->ClearRecordedOverflow();
    }
  }

  // The record; a device-resident record is read here, and only here.
  bool FoundInf() const { return IsEnabled() && scaler->RecordedOverflow(); }
  // The iteration's found-inf so far (the record and what was carried out of it).
  bool IterationFound() const { return HoldsRecord(state) && (carried_found || FoundInf()); }

  // Before another group is unscaled: the record's result goes to the groups that have none
  // yet and into carried_found (read on the host unless every group's is known), the record
  // keeps only the checks, so that the next read is the new group's own found-inf.
  void CarryRecord() {
    if (!IsEnabled()) {
      return;
    }
    const bool known = std::all_of(groups.begin(), groups.end(), [](const UnscaledGroup& g) { return g.found; });
    bool value = checked_found;
    if (known) {
      for (const UnscaledGroup& group : groups) {
        value = value || *group.found;
      }
    } else {
      value = FoundInf();
    }
    for (UnscaledGroup& group : groups) {
      if (!group.found) {
        group.found = value;
      }
    }
    carried_found = carried_found || value;
    if (amax_tracking) {
      carried_amax = MaxOf(carried_amax, scaler->RecordedAmax());
    }
    RestoreRecordOfChecks();
  }
  // The record holding only the checks' result (after CarryRecord(), or after a failed Step()).
  void RestoreRecordOfChecks() {
    scaler->ClearRecordedOverflow();
    if (checked_found) {
      scaler->MarkOverflow();
    }
  }

  // Unscales @p source as a new group and ORs its overflow into the record (on a device: its flag, no synchronisation).
  UnscaledGroup& UnscaleGroup(const GradientMap& source, const IOptimizer* optimizer) {
    GradientMap result;
    if (!IsEnabled()) {
      TensorList(source);  // the same null check as when enabled
      result = source;
    } else {
      BeginRecord();
      result = scaler->UnscaleAndRecordOverflow(source);
      unscaled_this_iteration = true;
    }
    groups.push_back(UnscaledGroup{.source = source,
                                   .result = std::move(result),
                                   .optimizer = optimizer,
                                   .stepped = false,
                                   .found = std::nullopt});
    if (state != Phase::Stepped) {
      state = Phase::Unscaled;
    }
    return groups.back();
  }

  // Makes the iteration that Step(optimizer) finished the current one again, with the scaler as
  // it was before that update, so that another optimizer is unscaled with the iteration's scale
  // and the update is computed again from the OR of every optimizer's found-inf. Moves the
  // finished iteration's record into @p taken and returns the scaler's state after the update,
  // both for Unreopen().
  std::vector<std::byte> Reopen(std::optional<Finished>& taken) {
    const Finished& f = *finished;
    std::vector<std::byte> after_update;
    if (!f.before_update.empty()) {
      after_update = scaler->ScaleSnapshot();
      try {
        scaler->RestoreScaleSnapshot(f.before_update);
      } catch (const Error& error) {
        throw InvalidOperationError(
            std::string("GradScaler::Step(): another optimizer already stepped in this iteration and updated the "
                        "scale, and the wrapped ILossScaler cannot restore its state from before that update to "
                        "unscale this optimizer with the iteration's scale (its RestoreScaleSnapshot() threw: ") +
            error.what() +
            "). Step every optimizer with Step(optimizer, StepMode::DeferStepAndUpdate) (or DeferUpdate) and call "
            "Update() after the last, or override "
            "ILossScaler::StateDict() and LoadStateDict() (or ScaleSnapshot() and RestoreScaleSnapshot()).");
      }
      scaler->ClearRecordedOverflow();
    }
    groups = std::move(previous);
    previous.clear();
    state = Phase::Stepped;
    carried_found = f.found;
    carried_amax = f.amax;
    // Tracking turned on since: the gradients stepped before were not tracked, so the
    // iteration's amax is unknown (not this optimizer's alone).
    amax_partial = amax_tracking && !f.amax_tracked;
    unscaled_this_iteration = !f.before_update.empty();
    resume_steps = steps;
    steps = f.step;
    reopened_overflowed = f.overflowed;
    taken = std::move(finished);
    finished.reset();
    return after_update;
  }
  // Undoes Reopen() (a Step() that failed after it).
  void Unreopen(const std::vector<std::byte>& after_update, Finished f) {
    if (!after_update.empty()) {
      scaler->RestoreScaleSnapshot(after_update);
    }
    std::vector<UnscaledGroup> reopened = std::move(groups);
    const std::int64_t resume = resume_steps.value_or(f.step + 1);
    ClearIteration();
    previous = std::move(reopened);
    steps = resume;
    finished = std::move(f);
  }

  // Applies the iteration's result once and returns to Ready (no synchronisation on a device
  // without observers or amax tracking). @p keep_open (Step(optimizer)) keeps what a further
  // optimizer of this iteration needs (Reopen()). Returns what the observers are to be told,
  // once the caller is done.
  std::optional<mlframework::detail::StepNotice> Finish(bool keep_open) {
    const bool observed = !observers.empty();
    float old_scale = 0.0f;
    if (observed) {
      old_scale = ScaleUsed();
      for (const UnscaledGroup& group : groups) {
        if (!pending_report && (group.found ? *group.found : FoundInf())) {
          ReportOverflow(group.result);  // Update() after Unscale() alone: the flag is read here
        }
      }
    }
    if (amax_tracking) {
      // Read before the update: the record (and with it the amax) is the iteration's.
      last_amax = IsEnabled() && unscaled_this_iteration && !amax_partial ? MaxOf(carried_amax, scaler->RecordedAmax())
                                                                          : std::nullopt;
    }
    Finished done;
    // The found-inf the update uses, for the observers: an iteration can have overflowed without
    // a report (a found-inf restored by LoadStateDict(), or a check made before an observer was
    // registered), and the observers must still hear of a skipped step.
    bool found = false;
    if (IsEnabled()) {
      if (keep_open) {
        // Every group's result on the host, for a further optimizer of this iteration: only a
        // group unscaled after the one stepped (Unscale(o1), Unscale(o2), Step(o1)) is read here.
        done.found = carried_found || checked_found;
        for (UnscaledGroup& group : groups) {
          if (!group.found) {
            group.found = FoundInf();
          }
          done.found = done.found || *group.found;
        }
        // The host copy of the state, current after the previous UpdateScale(bool): no device read.
        done.before_update = scaler->ScaleSnapshot();
        // The result is known on the host: updating with it keeps that copy current.
        scaler->UpdateScale(done.found);
        scaler->ClearRecordedOverflow();
        found = done.found;
      } else {
        if (carried_found) {
          scaler->MarkOverflow();
        }
        found = observed && FoundInf();  // a device read only for observers (read above already)
        scaler->UpdateScaleFromRecord();
      }
    }
    // A reopened iteration was reported when it first finished: it is reported again only
    // when a further optimizer's overflow turned it into an overflowed one.
    const bool first_report = !reopened_overflowed.has_value();
    const bool overflowed = pending_report.has_value() || reopened_overflowed.value_or(false) || found;
    const bool newly_overflowed = overflowed && !reopened_overflowed.value_or(false);
    const bool new_report = newly_overflowed && pending_report.has_value();
    if (new_report) {
      last_overflow = std::move(pending_report);
    }
    const std::int64_t step = steps++;
    if (resume_steps) {
      steps = *resume_steps;  // a reopened iteration keeps its index; the next one's is as before
    }
    const bool amax_tracked = amax_tracking && !amax_partial;
    std::vector<UnscaledGroup> done_groups = std::move(groups);
    ClearIteration();
    previous = std::move(done_groups);
    if (keep_open) {
      done.amax = last_amax;
      done.amax_tracked = amax_tracked;
      done.step = step;
      done.overflowed = overflowed;
      finished = std::move(done);
    } else {
      finished.reset();
    }
    if (!observed || (!first_report && !newly_overflowed)) {
      return std::nullopt;
    }
    mlframework::detail::StepNotice notice;
    notice.Event = StepEvent{.Step = step,
                             .LossScale = old_scale,
                             .NewLossScale = ScaleUsed(),
                             .Skipped = overflowed,
                             .GradientNorm = std::nullopt,
                             .GradientAmax = last_amax,
                             .Overflow = new_report ? &*last_overflow : nullptr,
                             .MinLossScale = MinScale()};
    return notice;
  }

  // The factor the loss is multiplied by, for StepEvent: 1 while disabled (the loss and gradients
  // pass through unscaled, whatever scale the idle scaler keeps).
  float ScaleUsed() const { return IsEnabled() ? scaler->CurrentScale() : 1.0f; }

  // The scaler's lowest scale when it has one (a dynamic scaler's configured MinScale), for StepEvent.
  std::optional<float> MinScale() const {
    if (!IsEnabled()) {
      return std::nullopt;
    }
    const std::optional<DynamicScalerStats> stats = scaler->GetStats();
    return stats && stats->MinScale > 0.0f ? std::optional<float>(stats->MinScale) : std::nullopt;
  }

  void Notify(const std::optional<mlframework::detail::StepNotice>& notice) const {
    if (notice) {
      mlframework::detail::NotifyObservers(observers, *notice);
    }
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

GradScaler::Impl& GradScaler::Live() const {
  if (!impl_) {
    throw InvalidOperationError(
        "GradScaler: this object was moved from and holds no scaler; use the GradScaler it was moved into, or "
        "assign a new GradScaler to this one.");
  }
  return *impl_;
}

const std::shared_ptr<ILossScaler>& GradScaler::Scaler() const { return Live().scaler; }
float GradScaler::CurrentScale() const { return Live().scaler->CurrentScale(); }
bool GradScaler::IsEnabled() const { return Live().IsEnabled(); }
GradScaler::IterationState GradScaler::State() const { return Live().state; }

TensorPtr GradScaler::Scale(const TensorPtr& loss) {
  Impl& s = Live();
  if (!loss) {
    throw ArgumentNullError("loss");
  }
  std::optional<mlframework::detail::StepNotice> notice;
  if (HoldsRecord(s.state)) {
    // The previous iteration recorded a result but never called Update() (spec 004's manual
    // flow skips it on overflow): apply it now, once.
    notice = s.Finish(false);
  }
  TensorPtr scaled = s.IsEnabled() ? s.scaler->ScaleLoss(loss) : loss;
  s.ForgetPrevious();  // a new loss means new gradients
  s.state = Phase::LossScaled;
  s.Notify(notice);
  return scaled;
}

GradientMap GradScaler::Unscale(const GradientMap& gradients) {
  Impl& s = Live();
  RefuseFloat8(gradients);
  if (!s.groups.empty()) {
    throw InvalidOperationError(
        "GradScaler::Unscale() was already called in this iteration; gradients are unscaled once per "
        "iteration. Call Update() (or Step()) to finish the iteration, then Scale(loss) for the next one; to "
        "unscale the gradients of several optimizers, call Unscale(optimizer) for each.");
  }
  if (s.UnscaledBefore(gradients) || s.Spoiled(gradients)) {
    throw InvalidOperationError(
        "GradScaler::Unscale(): these gradients were already unscaled (in the previous iteration, by a Step() "
        "whose optimizer threw, or before LoadStateDict() or Reset()). Run backward for new gradients and call "
        "Scale(loss) before unscaling again.");
  }
  if (s.finished && !s.finished->updated) {
    s.RefuseInClosedIteration("Unscale(gradients)");
    throw InvalidOperationError(
        "GradScaler::Unscale(gradients): Step(optimizer) already finished this iteration and updated the scale, "
        "so these gradients would be unscaled with the next iteration's scale. Call Scale(loss) to start the next "
        "iteration, or, for another optimizer of this one, Step(optimizer) (or Unscale(optimizer) for each "
        "optimizer before the first Step()).");
  }
  return s.UnscaleGroup(gradients, nullptr).result;
}

GradientMap GradScaler::Unscale(IOptimizer& optimizer) {
  Impl& s = Live();
  const GradientMap gradients = optimizer.GetGradients();
  RefuseFloat8(gradients);
  if (s.FindGroup(&optimizer, gradients) != nullptr) {
    throw InvalidOperationError(
        "GradScaler::Unscale(optimizer) was already called for this optimizer's gradients in this iteration; "
        "they are unscaled once. Call Step(optimizer) next (it reuses them), then Scale(loss) for the next "
        "iteration.");
  }
  if (s.UnscaledBefore(gradients) || s.Spoiled(gradients)) {
    throw InvalidOperationError(
        "GradScaler::Unscale(optimizer): these gradients were already unscaled (in the previous iteration, by a "
        "Step() whose optimizer threw, or before LoadStateDict() or Reset()). Run backward for new gradients and call "
        "Scale(loss) before unscaling again.");
  }
  if (s.finished && !s.SteppedBefore(&optimizer)) {
    s.RefuseInClosedIteration("Unscale(optimizer)");
    throw InvalidOperationError(
        "GradScaler::Unscale(optimizer): Step() of another optimizer already finished this iteration and updated "
        "the scale. Unscale every optimizer you clip before the first Step(), or step them with "
        "Step(optimizer, StepMode::DeferUpdate) and call Update() after the last.");
  }
  s.finished.reset();
  if (!s.groups.empty()) {
    s.CarryRecord();
  }
  return s.UnscaleGroup(gradients, &optimizer).result;
}

bool GradScaler::CheckOverflow(const GradientMap& gradients) {
  Impl& s = Live();
  TensorList(gradients);  // ArgumentNullError naming a null entry
  RefuseFloat8(gradients);
  if (s.finished && !s.finished->updated) {
    s.RefuseInClosedIteration("CheckOverflow()");
    // As Unscale(gradients): a result recorded now would open an iteration of its own, and the
    // Update() after it would update the scale a second time for this one.
    throw InvalidOperationError(
        "GradScaler::CheckOverflow(): Step(optimizer) already finished this iteration and updated the scale "
        "from its check, so a check recorded now would update the scale a second time. Step(optimizer) of another "
        "optimizer checks its gradients and joins the iteration (its result says whether they overflowed); call "
        "Scale(loss) to start the next iteration.");
  }
  if (UnscaledGroup* group = s.FindGroup(nullptr, gradients)) {
    // The fused unscale pass already checked them and recorded the result.
    const bool found = group->found ? (*group->found || s.checked_found) : s.FoundInf();
    if (found) {
      s.ReportOverflow(group->result);
    }
    return found;
  }
  const bool overflow = s.IsEnabled() && s.scaler->CheckOverflow(gradients);
  if (overflow) {
    s.ReportOverflow(gradients);  // before any change: it may throw (a tensor that cannot be read)
  }
  s.BeginRecord();
  if (overflow) {
    s.scaler->MarkOverflow();
    s.checked_found = true;
  }
  if (!HoldsRecord(s.state)) {
    s.state = Phase::Checked;
    s.finished.reset();
  }
  return overflow;
}

void GradScaler::Update() {
  Impl& s = Live();
  if (!HoldsRecord(s.state)) {
    if (s.state == Phase::Ready && s.finished && !s.finished->updated) {
      // PyTorch's Step(o1), Step(o2), Update(): Step() already applied the iteration's update.
      // The iteration ends: a further optimizer would be unscaled with the updated scale.
      s.finished->updated = true;
      if (s.finished->closed_by == nullptr) {
        s.finished->closed_by = "Update()";
      }
      return;
    }
    throw InvalidOperationError(
        "GradScaler::Update() called with no overflow check recorded in this iteration: call Unscale(), "
        "CheckOverflow() or Step(optimizer, StepMode::DeferUpdate) first (Step(optimizer) already updates the "
        "scale).");
  }
  const bool stepped =
      std::any_of(s.groups.begin(), s.groups.end(), [](const UnscaledGroup& group) { return group.stepped; });
  const std::optional<mlframework::detail::StepNotice> notice = s.Finish(false);
  if (stepped) {
    // The deferred flow's iteration ends here: an optimizer that did not step in it would be
    // unscaled with the updated scale, so it may no longer join.
    s.finished = Impl::Finished{};
    s.finished->closed_by = "Update()";
    s.finished->updated = true;
  }
  s.Notify(notice);
}

bool GradScaler::Step(IOptimizer& optimizer, StepMode mode) { return StepImpl(optimizer, mode); }

bool GradScaler::StepImpl(IOptimizer& optimizer, StepMode mode, bool* committed) {
  Impl& s = Live();
  if (mode != StepMode::StepAndUpdate && mode != StepMode::DeferUpdate && mode != StepMode::DeferStepAndUpdate) {
    throw ArgumentError("mode", "is StepMode " + std::to_string(static_cast<int>(mode)) +
                                    ", not StepAndUpdate, DeferUpdate or DeferStepAndUpdate");
  }
  const bool run_optimizer = mode != StepMode::DeferStepAndUpdate;
  const bool update_scale = mode == StepMode::StepAndUpdate;
  const GradientMap gradients = optimizer.GetGradients();
  RefuseFloat8(gradients);
  UnscaledGroup* group = s.FindGroup(&optimizer, gradients);
  bool reopen = false;
  if (group != nullptr && group->stepped) {
    throw InvalidOperationError(
        "GradScaler::Step() was already called for this optimizer in this iteration (with a StepMode that "
        "defers the update): call Update() to finish the iteration before stepping it again.");
  }
  if (group == nullptr) {
    if (s.state == Phase::Unscaled && s.HasUnclaimedGroup()) {
      // The clipping flow: Unscale(optimizer's gradients), clip, Step(optimizer).
      throw InvalidOperationError(
          "GradScaler::Step(): Unscale() was called in this iteration on gradients that are not this "
          "optimizer's. Unscale the optimizer's own gradients (GetGradients(), or Unscale(optimizer) for each "
          "of several optimizers) or call Update() to finish the manual flow.");
    }
    if (s.Spoiled(gradients)) {
      throw InvalidOperationError(
          "GradScaler::Step(): these gradients were unscaled by a Step() whose optimizer threw (in place, or "
          "kept by the optimizer), or in place or stepped before LoadStateDict() or Reset() replaced the iteration; "
          "stepping them again would unscale them twice. Run backward for new gradients and call Scale(loss).");
    }
    // Another optimizer of the iteration that Step() finished joins it (its gradients new, or
    // unscaled by Unscale(optimizer) before that Step()); the same optimizer again (new
    // gradients, no Scale(loss)) starts the next iteration.
    reopen = s.WouldJoin(&optimizer, gradients);
    if (reopen && s.finished->closed_by != nullptr) {
      throw InvalidOperationError(std::string("GradScaler::Step(): another optimizer stepped in this iteration "
                                              "and ") +
                                  s.finished->closed_by +
                                  " then ended it or replaced its scale state or switch, so this optimizer cannot "
                                  "join the iteration: its gradients were scaled with the iteration's scale and "
                                  "switch, which are gone, and would be unscaled with the current ones. Step every "
                                  "optimizer of an iteration before finishing it, or call Scale(loss) and run "
                                  "backward for the next iteration.");
    }
    if (!reopen && s.UnscaledBefore(gradients)) {
      throw InvalidOperationError(
          "GradScaler::Step() called twice on the same gradients: the previous Step() already unscaled and "
          "applied them. Run backward for new gradients and call Scale(loss) before stepping again.");
    }
  }

  // From here on, a failure (the optimizer's SetGradients() or Step() throwing) undoes what
  // this call did to the scaler.
  const Phase state_before = s.state;
  const bool unscaled_before = s.unscaled_this_iteration;
  const bool reported_before = s.pending_report.has_value();
  std::optional<Impl::Finished> finished_before;
  std::vector<std::byte> after_update;
  bool new_group = false;
  bool handed_over = false;
  bool overflow = false;
  try {
    if (reopen) {
      after_update = s.Reopen(finished_before);  // changes nothing when it throws
      group = s.FindGroup(&optimizer, gradients);
    } else if (group == nullptr) {
      s.finished.reset();
    }
    if (group == nullptr) {
      if (!s.groups.empty()) {
        s.CarryRecord();
      }
      group = &s.UnscaleGroup(gradients, &optimizer);
      new_group = true;
    }
    // The one read of a device flag in a step: Step must decide and return it.
    overflow = group->found ? (*group->found || s.checked_found) : s.FoundInf();
    if (overflow) {
      s.ReportOverflow(group->result);
    }
    if (!overflow) {
      if (!SameTensors(group->result, gradients)) {
        optimizer.SetGradients(group->result);  // FP16/BF16 model gradients -> FP32 unscaled gradients
        handed_over = true;
      }
      if (run_optimizer) {
        optimizer.Step();
      }
    }
  } catch (...) {
    bool optimizer_restored = !handed_over;
    if (handed_over) {
      try {
        optimizer.SetGradients(gradients);  // the optimizer's own gradients back
        optimizer_restored = true;
      } catch (...) {  // NOLINT(bugprone-empty-catch): it keeps the unscaled ones; they are refused below
      }
    }
    if (new_group) {
      UnscaledGroup failed = std::move(s.groups.back());
      s.groups.pop_back();
      s.state = state_before;
      s.unscaled_this_iteration = unscaled_before;
      if (!reported_before) {
        s.pending_report.reset();
      }
      if (s.IsEnabled()) {
        s.RestoreRecordOfChecks();
        if (failed.InPlace() || !optimizer_restored) {
          s.spoiled.push_back(std::move(failed));
        }
      }
    }
    if (finished_before) {
      s.Unreopen(after_update, std::move(*finished_before));
    }
    throw;
  }
  group->optimizer = &optimizer;
  group->stepped = true;
  group->found = overflow;
  if (committed != nullptr) {
    *committed = true;
  }
  if (update_scale) {
    s.Notify(s.Finish(true));
  } else {
    s.state = Phase::Stepped;
  }
  return !overflow;
}

void GradScaler::AbandonIteration() noexcept {
  if (impl_) {
    impl_->ClearIteration();
    impl_->ForgetPrevious();
  }
}

void GradScaler::Enable() {
  Impl& s = Live();
  if (s.state != Phase::Ready) {
    throw InvalidOperationError(
        "GradScaler::Enable() called in the middle of an iteration (the loss or gradients were already "
        "scaled with the old setting): finish it with Step() or Update() first.");
  }
  const bool was_enabled = s.IsEnabled();
  s.scaler->SetEnabled(true);
  s.own_enabled = true;
  s.CloseFinishedIfSwitched(was_enabled, "Enable()");
}

void GradScaler::Disable() {
  Impl& s = Live();
  if (s.state != Phase::Ready) {
    throw InvalidOperationError(
        "GradScaler::Disable() called in the middle of an iteration (the loss or gradients were already "
        "scaled): finish it with Step() or Update() first.");
  }
  const bool was_enabled = s.IsEnabled();
  if (!s.scaler->SetEnabled(false)) {
    s.own_enabled = false;  // the scaler has no switch of its own
  }
  s.CloseFinishedIfSwitched(was_enabled, "Disable()");
}

void GradScaler::Reset() {
  Impl& s = Live();
  s.scaler->Reset();
  s.DropIteration("Reset()", true);
  s.last_overflow.reset();
  s.last_amax.reset();  // the amax belonged to the run before the reset
}

const std::optional<OverflowReport>& GradScaler::LastOverflow() const { return Live().last_overflow; }

std::int64_t GradScaler::StepIndex() const { return Live().steps; }

void GradScaler::SetStepIndex(std::int64_t step) {
  Impl& s = Live();
  mlframework::detail::RequireStepIndex(step);
  if (s.resume_steps) {
    s.resume_steps = step;  // a reopened iteration keeps its index (a joining optimizer's deferred step)
    return;
  }
  s.steps = step;
  if (s.pending_report) {
    s.pending_report->Step = step;
  }
}

void GradScaler::SetGradientOrder(std::vector<std::string> names) { Live().gradient_order = std::move(names); }

const std::vector<std::string>& GradScaler::GradientOrder() const { return Live().gradient_order; }

void GradScaler::AddObserver(std::shared_ptr<ITrainingObserver> observer) {
  mlframework::detail::AddObserver(Live().observers, std::move(observer));
}

bool GradScaler::RemoveObserver(const std::shared_ptr<ITrainingObserver>& observer) {
  return mlframework::detail::RemoveObserver(Live().observers, observer);
}

TensorPtr GradScaler::GetScaleTensor() {
  Impl& s = Live();
  const float factor = s.IsEnabled() ? s.scaler->CurrentScale() : 1.0f;
  if (!s.scale_tensor || s.scale_tensor_value != factor) {
    // A scaler disabled by the own switch still reports its scale: the factor is 1 then.
    s.scale_tensor = s.own_enabled ? s.scaler->GetScaleTensor() : Scalar(1.0f);
    s.scale_tensor_value = factor;
  }
  return s.scale_tensor;
}

std::optional<DynamicScalerStats> GradScaler::GetStats() const { return Live().scaler->GetStats(); }

std::vector<std::byte> GradScaler::StateDict() const {
  const Impl& s = Live();
  const std::vector<std::byte> inner = s.scaler->StateDict();
  mlframework::detail::BlobWriter writer(kGradScalerKind, kGradScalerVersion);
  writer.U64(inner.size());
  writer.Bytes(inner);
  writer.U8(static_cast<std::uint8_t>(s.state));
  writer.U8(s.IterationFound() ? 1 : 0);
  writer.U8(s.own_enabled ? 1 : 0);
  writer.I64(s.steps);
  return writer.Finish();
}

void GradScaler::LoadStateDict(std::span<const std::byte> state) {
  Impl& s = Live();
  std::uint16_t version = 0;
  mlframework::detail::BlobReader reader = mlframework::detail::OpenBlobVersion(
      state, kGradScalerKind, {kGradScalerVersion, kGradScalerVersion2, kGradScalerVersion1}, version);
  if (version == kGradScalerVersion1) {
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
  if (version == kGradScalerVersion1) {
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
  std::optional<std::int64_t> steps;
  if (version == kGradScalerVersion) {
    steps = reader.Count("step index");
  }
  reader.ExpectEnd();
  // Everything of ours is validated; the scaler validates its blob before changing anything.
  s.scaler->LoadStateDict(inner);
  // The blob holds no gradients; loaded between iterations (the blob's state Ready), the
  // iteration an optimizer stepped in stays, closed (DropIteration). A blob saved within an
  // iteration replaces the iteration with its own.
  s.DropIteration("LoadStateDict()", iteration == Phase::Ready);
  s.state = iteration;
  s.own_enabled = own_enabled;
  if (steps) {
    s.steps = *steps;
  }
  s.checked_found = found_inf;  // the gradients are not saved: the result stands for the whole iteration
  s.scaler->ClearRecordedOverflow();
  if (found_inf) {
    s.scaler->MarkOverflow();
  }
}

void GradScaler::SetAmaxTracking(bool on) {
  Impl& s = Live();
  if (!s.scaler->SetAmaxTracking(on) && on) {
    throw InvalidOperationError(
        std::string("GradScaler::SetAmaxTracking(true)") +
        ": the wrapped ILossScaler cannot track the amax (its SetAmaxTracking() returned false); override "
        "ILossScaler::SetAmaxTracking() and RecordedAmax(), or use a built-in scaler");
  }
  s.amax_tracking = on;
  s.last_amax.reset();
}

bool GradScaler::AmaxTracking() const { return Live().amax_tracking; }

std::optional<float> GradScaler::LastAmax() const { return Live().last_amax; }

}  // namespace mlframework::amp
