#pragma once
/// @file GradScaler.hpp
/// @brief The high-level mixed-precision API: scale the loss, unscale, skip on overflow, adapt the scale.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/amp/ILossScaler.hpp>
#include <mlframework/amp/IOptimizer.hpp>
#include <mlframework/amp/StepMode.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/ITrainingObserver.hpp>
#include <mlframework/core/OverflowReport.hpp>
#include <mlframework/export.hpp>

namespace mlframework::amp {

class GradScalerContext;

/// Wraps an ILossScaler with the training-loop protocol of spec 004 (PyTorch's GradScaler).
///
/// **One iteration, one scale update.** The scaler tracks the current iteration like
/// PyTorch's per-optimizer state, so whichever flow is used the scale is updated exactly once:
///
/// | flow | calls |
/// |---|---|
/// | automatic | `Scale(loss)`, backward, `Step(opt)` (steps the optimizer and updates the scale) |
/// | deferred | `Scale(loss)`, backward, `Step(opt, StepMode::DeferStepAndUpdate)`, `opt.Step()` if it returned true,
/// `Update()` | | deferred update | `Scale(loss)`, backward, `Step(opt, StepMode::DeferUpdate)` (steps the optimizer),
/// `Update()` | | manual (spec 004) | `Scale(loss)`, backward, `Unscale(grads)`, `CheckOverflow(grads)`, your step,
/// `Update()` | | RAII | `GradScalerContext ctx(scaler, loss)`, backward, `ctx.Step(opt)` | | several optimizers
/// (PyTorch's) | `Scale(loss)`, backward, [`Unscale(o1)`, clip], `Step(o1)`, `Step(o2)`,
/// [`Update()`] |
///
/// **Several optimizers per iteration**, as in PyTorch: each optimizer's gradients are unscaled
/// once, with the iteration's scale (the one in force at `Scale(loss)`); each optimizer is
/// skipped only when its own gradients hold Inf/NaN; the scale is updated once per iteration,
/// from the OR of all of them. Any of the flows above works with several optimizers:
/// `Step(o1); Step(o2)`, `Step(o1, mode); Step(o2, mode); Update()` with a deferring StepMode, `Unscale(o1);
/// Unscale(o2)` before the steps, and `ctx.Step(o1); ctx.Step(o2)`. Spec 004's rule that the scale is updated after
/// `Step(opt)` holds: `Step(o1)` updates the scale at once, and keeps a snapshot of the scale state from before that
/// update (ILossScaler::ScaleSnapshot()). A `Step(o2)` of another optimizer before the next `Scale(loss)` joins that
/// iteration: the scaler goes back to that snapshot (RestoreScaleSnapshot()), unscales o2 with the iteration's scale,
/// and updates again from the OR of o1's and o2's found-inf. So the scale, the growth counter and the statistics end as
/// if the update had been computed once from all optimizers (on a growth step, a clean o1 grows the scale and an
/// overflowing o2 turns it into a backoff). `Update()` after such steps is accepted and changes nothing. An optimizer
/// is told apart by its address (the same IOptimizer object); the same optimizer stepped again without `Scale(loss)`
/// starts the next iteration, as with one optimizer. A custom ILossScaler whose RestoreScaleSnapshot() cannot restore
/// its state (ILossScaler's default, LoadStateDict(), once the scale changed) refuses a joining `Step(o2)` with
/// an InvalidOperationError; step such a scaler's optimizers with a deferring StepMode and `Update()`.
///
/// **Iteration state** (IterationState, like PyTorch's `OptState`, kept per optimizer inside).
/// `Ready`, `Unscaled` and `Stepped` are PyTorch's three; `LossScaled` and `Checked` are the
/// steps of spec 004's manual flow. "apply" below is `UpdateScale` with the iteration's found-inf
/// (the OR of every optimizer's and every check's), once.
///
/// | call | Ready | LossScaled | Checked | Unscaled | Stepped |
/// |---|---|---|---|---|---|
/// | `Scale(loss)` | LossScaled | LossScaled | apply, LossScaled | apply, LossScaled | apply, LossScaled |
/// | `CheckOverflow` | Checked (3) | Checked | Checked | Unscaled | Stepped |
/// | `Unscale(grads)` | Unscaled (3) | Unscaled | Unscaled | **error** | **error** |
/// | `Unscale(opt)` | Unscaled (3) | Unscaled | Unscaled | Unscaled (2) | Stepped (2) |
/// | `Step(opt)` | apply, Ready (4) | apply, Ready | apply, Ready | apply, Ready (1) | apply, Ready (2) |
/// | `Step(opt, mode)`, mode deferring the update | Stepped (4) | Stepped | Stepped | Stepped (1) | Stepped (2) |
/// | `Update()` | **error** (5) | **error** | apply, Ready | apply, Ready | apply, Ready |
/// | `Enable()`, `Disable()` | Ready | **error** | **error** | **error** | **error** |
///
/// - (1) the gradient-clipping flow: `Step` reuses the gradients this iteration unscaled when
///   they are the optimizer's (`Unscale(opt)`, or `Unscale(grads)` of its GetGradients()), and
///   unscales those of another optimizer, except after `Unscale(grads)` of gradients no optimizer
///   stepped yet (the manual flow): then it is an InvalidOperationError.
/// - (2) an optimizer that was not unscaled or stepped in this iteration yet; one that was is an
///   InvalidOperationError (`Unscale` twice, `Step` after a deferring `Step(opt, mode)` before `Update()`).
/// - (3) after `Step(opt)` finished the iteration (no `Scale(loss)` since), `Unscale` and
///   `CheckOverflow` are an InvalidOperationError: the gradients would be unscaled with the next
///   iteration's scale, and a check would update the scale a second time (`Unscale(opt)` of the
///   optimizer that stepped starts the next iteration).
/// - (4) after `Step(o1)` finished the iteration (no `Scale(loss)` since), another optimizer
///   joins it (see above); o1 again starts the next iteration.
/// - (5) accepted, changing nothing, right after `Step(opt)` finished the iteration, and after
///   `Reset()` or `LoadStateDict()` of a blob saved between iterations dropped an iteration an
///   optimizer stepped in. `Update()` ends an iteration an optimizer stepped in: until the next
///   `Scale(loss)`, another optimizer's `Step` and `Unscale(opt)` are an InvalidOperationError
///   (its gradients would be unscaled with the updated scale), and so is a second `Update()`.
/// - Checked, Unscaled and Stepped hold a found-inf result, kept in the scaler's record
///   (ILossScaler's found-inf record). When a further optimizer is unscaled, the record is read
///   into the earlier optimizers' results first (one device read, only with several optimizers),
///   so each optimizer keeps its own. `CheckOverflow` on gradients this iteration already
///   unscaled returns their result without a second pass; a check of other gradients that finds
///   Inf/NaN skips every optimizer of the iteration (spec 004's manual flow).
/// - `Scale(loss)` applying a pending result is spec 004's manual flow, which skips `Update()` on
///   overflow: the scale still backs off exactly once.
/// - `Reset()` and an abandoned GradScalerContext return to Ready from any state and drop the
///   iteration's result: no scale update. After `Reset()`, an optimizer that would join an
///   iteration another one stepped in is refused until the next `Scale(loss)` (see Reset()).
/// - Stepping or unscaling again, without a new `Scale(loss)`, the very gradients the previous
///   iteration already unscaled (or their unscaled FP32 tensors) is an InvalidOperationError
///   (they would be unscaled twice).
/// - "The same gradients" means the same names over the same memory (device, dtype, element
///   count, first element), whatever `TensorPtr`s hold it: a framework that wraps its gradients
///   anew on every call (`backends::cpu::Wrap`, `FromDLPack`) gets the clipping flow and these
///   checks, and one that keeps its gradient buffers (the same memory every iteration) steps
///   normally, since `Scale(loss)` starts a new iteration. Tensors whose memory the library cannot
///   see (no host bytes, no device backend) are the same only as themselves. Two optimizers
///   must not share a gradient tensor (it would be unscaled twice; PyTorch does not check it
///   either, and neither does this class, beyond whole gradient maps).
///
/// Every error leaves the scaler unchanged. When the optimizer's SetGradients() or Step() throws
/// inside `Step`, the call is rolled back: the scaler's state, record and statistics are as
/// before it; FP32 gradients that the call unscaled in place hold unscaled values, so stepping
/// or unscaling them again before the next `Scale(loss)` is an InvalidOperationError (FP16/BF16
/// gradients were not changed and may be stepped again). Loss scaling takes FP32, FP16 and BF16
/// gradients: FP8 ones (Float8E4M3FN, Float8E5M2) are an ArgumentError naming the gradient and
/// its dtype. A moved-from GradScaler throws InvalidOperationError from every member (assigning
/// a GradScaler to it makes it usable again).
///
/// **Unscaling** multiplies by the inverse scale (computed in double). FP32 gradients are
/// unscaled in place with one fused unscale-and-check pass, so the optimizer's own tensors
/// change; FP16/BF16 gradients are unscaled into FP32 tensors (one fused cast pass) owned by
/// the scaler and reused by the next iteration (each optimizer of an iteration gets its own, also
/// when their gradients have the same names), and `Step` hands those to the optimizer with
/// `SetGradients` (FP16 model gradients, FP32 master gradients, as Apex O2 and Megatron do).
///
/// **On a device** (gradients whose backend is a DeviceScalingBackend, e.g. CUDA tensors) the
/// built-in dynamic scaler keeps its state on the device (DynamicLossScaler's class notes): the
/// iteration's found-inf lives in the device flag and `Update()` runs the scale update there.
/// Host synchronisations per iteration:
/// - none: `Scale(loss)` (loss on the state's device), `Unscale()`, `Update()`, and applying a
///   pending result at the next `Scale(loss)` — the manual flow, where a fused optimizer may read
///   the flag on the device through `DynamicLossScaler::DeviceState()`;
/// - one: `Step()` reads the flag once, because it must decide whether to call
///   `optimizer.Step()` and return that decision (as torch.cuda.amp does for non-fused optimizers);
///   the snapshot `Step(opt)` keeps for a further optimizer of the iteration is the host copy
///   of the scale state, which the step's own update (with the found-inf it read) keeps
///   current, so it reads nothing more (only the first `Step(opt)` after an `Update()` or a
///   `Scale(loss)` that applied a pending result reads the state once); a further optimizer
///   reads its own flag, and a joining `Step(o2)` also writes the snapshot back (one
///   host-to-device copy); `CheckOverflow()` reads the flag to return its bool;
/// - when asked: `CurrentScale()`, `GetStats()`, `GetScaleTensor()`, `StateDict()` (which also reads a
///   pending found-inf), `Reset()` (writes the state), the first device iteration (creates it).
///
/// A scaler that keeps the ILossScaler defaults of the found-inf record (the static scaler, most
/// custom ones) reads the overflow flag at unscale time (TensorBackend).
///
/// **Overflow reports and observers.** On an iteration that overflowed, the scaler reads the
/// checked gradients once more (ScanNonFinite) to build an OverflowReport: the gradients with
/// Inf/NaN, their counts, first indices and kinds. It is built where the iteration's overflow is
/// known on the host: `Step()`, a `CheckOverflow()` that returns true, and, with an observer
/// registered, the `Update()` (or `Scale(loss)`) that finishes an iteration whose result was not
/// read yet (after `Unscale()` alone; on a device that read is a synchronisation, so without
/// observers that flow builds no report). It is committed when the iteration finishes, as
/// LastOverflow(). The scan of device gradients waits for the device, so on a device the report
/// is built only while an observer is registered: without one, `Step()` keeps its one
/// synchronisation and LastOverflow() stays empty. Observers (ITrainingObserver) are called by the call that finishes
/// the iteration (`Step(opt)`, `Update()`, or `Scale(loss)` applying a pending result), after the scale update:
/// overflow, skipped step (an overflowed iteration is a skipped step), backoff or growth, then OnStep. An observer's
/// exception reaches the caller after every observer ran; the scaler's state is committed (for `Scale(loss)`: the new
/// iteration has started, call it again for the scaled loss). The step index counts finished iterations from 0,
/// or from the framework's global step set with SetStepIndex(); StateDict() saves it and
/// LoadStateDict() restores it. Overflow reports list the gradients in the order given to
/// SetGradientOrder() (the framework's registration or backward order), the others after them
/// in name order. StepEvent::MinLossScale is the wrapped scaler's minimum scale (its
/// GetStats()' MinScale), so OverflowLogger notes when the scale reaches it.
/// A further optimizer that joins an iteration `Step(o1)` finished (several optimizers, above) and
/// overflows where the iteration had not is reported then: the iteration's events come again,
/// with the same step index, the backoff and the overflow report; otherwise it reports nothing more.
///
/// **Any ILossScaler** is driven through the interface alone, so a custom scaler gets the same
/// flows, statistics (ILossScaler::GetStats) and checkpoints (ILossScaler::StateDict) as the
/// built-in ones.
///
/// **Disabled**, the scaler passes the loss and gradients through unchanged, never reports
/// overflow and never skips a step; observers' StepEvent says scale 1. Enable()/Disable() belong between iterations.
///
/// Not thread-safe; move-only.
///
/// @code
/// amp::GradScaler scaler;                 // dynamic, spec defaults
/// for (...) {
///   auto loss = scaler.Scale(model.Forward(inputs));
///   model.Backward(loss);                  // gradients land in `optimizer`
///   if (!scaler.Step(optimizer)) { /* overflow: step skipped, scale backed off */ }
/// }
/// @endcode
class MLFRAMEWORK_EXPORT GradScaler {
 public:
  /// Where the current iteration stands (see the class notes). The values are stored in StateDict().
  enum class IterationState : std::uint8_t {
    Ready = 0,       ///< Nothing recorded.
    LossScaled = 1,  ///< Scale(loss) ran; no found-inf recorded yet.
    Checked = 2,     ///< CheckOverflow() recorded found-inf; nothing unscaled.
    Unscaled = 3,    ///< Unscale() unscaled the gradients and recorded found-inf.
    Stepped = 4,     ///< Step(optimizer, mode) deferring the update ran; Update() finishes the iteration.
  };

  /// Dynamic loss scaling with DynamicScalerConfig's defaults (spec 004's default constructor).
  GradScaler();
  /// Dynamic loss scaling configured by @p config (spec 004's dynamic constructor; fields by name).
  /// ArgumentError naming the invalid field.
  explicit GradScaler(DynamicScalerConfig config);
  /// Wraps a custom scaler. ArgumentNullError("scaler") when null.
  explicit GradScaler(std::shared_ptr<ILossScaler> scaler);
  /// Static loss scaling (spec 004's `GradScaler(float scale = 65536, bool enabled = true)`,
  /// which collides with the dynamic constructor in C++). ArgumentError for an invalid scale.
  static GradScaler Static(float scale = 65536.0f, bool enabled = true);
  /// Dynamic loss scaling with spec 004's positional parameters.
  static GradScaler Dynamic(float initialScale = 65536.0f, float growthFactor = 2.0f, float backoffFactor = 0.5f,
                            int growthInterval = 2000, float minScale = 1.0f, float maxScale = 16777216.0f,
                            bool enabled = true);
  /// Releases the scaler (shared ownership) and the unscale buffers.
  ~GradScaler();
  /// Moves the scaler and its iteration state.
  GradScaler(GradScaler&& other) noexcept;
  /// Moves the scaler and its iteration state.
  GradScaler& operator=(GradScaler&& other) noexcept;
  /// Move-only: two GradScalers sharing one scaler and iteration would update it twice.
  GradScaler(const GradScaler&) = delete;
  /// Move-only.
  GradScaler& operator=(const GradScaler&) = delete;

  /// The wrapped loss scaler.
  const std::shared_ptr<ILossScaler>& Scaler() const;
  /// The current scaling factor.
  float CurrentScale() const;
  /// CurrentScale() under spec 004's name (`GradScaler.Scale { get; }`); not to be confused with
  /// the action Scale(loss).
  float Scale() const { return CurrentScale(); }
  /// Whether scaling is applied.
  bool IsEnabled() const;
  /// IsEnabled() under spec 004's name (`GradScaler.Enabled { get; }`).
  bool Enabled() const { return IsEnabled(); }
  /// Where the current iteration stands.
  IterationState State() const;

  /// The loss times the scale (the loss itself when disabled); starts an iteration (see the class notes).
  /// ArgumentNullError("loss") when null.
  TensorPtr Scale(const TensorPtr& loss);
  /// Unscales the optimizer's gradients (unless Unscale() already did), hands them back with
  /// SetGradients, then does what @p mode says (StepMode, the same on GradScalerContext): by
  /// default steps the optimizer and updates the scale; StepMode::DeferUpdate steps the optimizer
  /// and leaves the update to Update(); StepMode::DeferStepAndUpdate does neither (call
  /// `optimizer.Step()` if this returned true, then Update()). Returns false when this
  /// optimizer's gradients overflowed (its step skipped). Several optimizers per iteration: see
  /// the class notes. When the optimizer's SetGradients() or Step() throws, the scaler is as
  /// before the call (FP32 gradients unscaled in place by it are then refused until the next
  /// Scale(loss)). ArgumentError naming an FP8 gradient or a @p mode that is not a StepMode.
  bool Step(IOptimizer& optimizer, StepMode mode = StepMode::StepAndUpdate);
  /// Unscales @p gradients (FP32 in place, FP16/BF16 into FP32) and records overflow for this
  /// iteration (spec 004's manual flow); InvalidOperationError when this iteration already
  /// unscaled (for several optimizers use Unscale(optimizer)). ArgumentError naming an FP8 gradient.
  GradientMap Unscale(const GradientMap& gradients);
  /// PyTorch's `unscale_(optimizer)`, for clipping: unscales @p optimizer's gradients
  /// (GetGradients(); FP32 in place, FP16/BF16 into FP32) and returns the unscaled tensors, which
  /// the next `Step(optimizer)` hands to the optimizer without unscaling again. Once per
  /// optimizer and iteration; each optimizer of an iteration may be unscaled, before the first
  /// `Step(optimizer)` of the iteration (see the class notes). InvalidOperationError otherwise,
  /// ArgumentError naming an FP8 gradient.
  GradientMap Unscale(IOptimizer& optimizer);
  /// Applies the recorded overflow result to the scale and ends the iteration. After
  /// `Step(optimizer)` (PyTorch's `step(o1)`, `step(o2)`, `update()`), it is accepted and changes
  /// nothing: the step already applied the iteration's update. InvalidOperationError otherwise
  /// when no overflow check was recorded. Once it ended an iteration an optimizer stepped in,
  /// `Step` and `Unscale(optimizer)` of an optimizer that did not step in it are an
  /// InvalidOperationError until the next `Scale(loss)` (its gradients, scaled with the
  /// iteration's scale, would be unscaled with the updated one): step every optimizer first.
  void Update();
  /// True when any of @p gradients holds Inf or NaN (false when disabled); records it for this
  /// iteration. InvalidOperationError after `Step(optimizer)` finished the iteration (no
  /// `Scale(loss)` since): the following Update() would update the scale a second time (another
  /// optimizer's `Step(optimizer)` checks its gradients). ArgumentError naming an FP8 gradient.
  bool CheckOverflow(const GradientMap& gradients);
  /// Enables scaling (in state Ready; InvalidOperationError otherwise): ILossScaler::SetEnabled,
  /// and GradScaler's own switch in front of a scaler that has none. Between `Step(o1)` and
  /// `Step(o2)` of PyTorch's flow, a switch that changes leaves o2 refused (InvalidOperationError
  /// from `Step(o2)` and `Unscale(o2)`, whose gradients were made under the old switch) until the
  /// next `Scale(loss)`; one that stays as it is lets o2 join the iteration.
  void Enable();
  /// Disables scaling (in state Ready; InvalidOperationError otherwise): ILossScaler::SetEnabled,
  /// or GradScaler's own switch when the scaler has none (SetEnabled returned false). Between
  /// `Step(o1)` and `Step(o2)`: as Enable().
  void Disable();
  /// The scaler's ILossScaler::Reset() (the dynamic scaler: back to the initial scale, counters
  /// cleared; the static scaler: nothing), then the iteration is dropped (state Ready) and
  /// LastOverflow() cleared. Observers stay registered. The gradients in memory stay as they are:
  /// those this iteration unscaled in place or stepped, and those the previous one stepped, stay
  /// refused (InvalidOperationError) until the next `Scale(loss)`, as they would be unscaled or
  /// stepped twice. Called between `Step(o1)` and `Step(o2)` of PyTorch's flow (or after a
  /// deferring `Step(o1, mode)`), it ends that iteration: o2's gradients were scaled with the
  /// scale the reset replaced, so `Step(o2)` and `Unscale(o2)` are an InvalidOperationError until
  /// the next `Scale(loss)`; `Update()` is accepted and changes nothing.
  void Reset();
  /// The factor the loss is multiplied by, as an FP32 scalar (1 when disabled), cached until it changes.
  TensorPtr GetScaleTensor();
  /// The wrapped scaler's statistics (ILossScaler::GetStats): the dynamic scaler's; empty for the
  /// static scaler and for a custom scaler that does not override GetStats().
  std::optional<DynamicScalerStats> GetStats() const;

  /// The report of the most recent iteration that overflowed (since construction or Reset()), or
  /// nullopt when none has (see the class notes for when a report is built). The reference stays
  /// valid until the next overflowed iteration finishes.
  const std::optional<OverflowReport>& LastOverflow() const;
  /// Registers @p observer (shared ownership; see the class notes). ArgumentNullError("observer")
  /// for null, ArgumentError when it is already registered; nothing changes on error. GradScalerContext
  /// steps through this scaler, so its steps reach the observer too.
  void AddObserver(std::shared_ptr<ITrainingObserver> observer);
  /// Unregisters @p observer; false when it was not registered. ArgumentNullError("observer") for null.
  bool RemoveObserver(const std::shared_ptr<ITrainingObserver>& observer);
  /// Turns amax tracking (headroom telemetry) on or off; off by default. While on, the unscale of
  /// each iteration also takes the largest finite absolute value of the unscaled gradients
  /// (max|g| / scale, what the optimizer receives) in the same pass as its overflow check; Inf
  /// and NaN are left out, so an overflowing iteration still reports the amax of its finite
  /// values (and is skipped as usual). HeadroomBits() (core/Headroom.hpp) turns it into the bits
  /// left before the gradient dtype overflows. While off, the kernels are the plain ones.
  /// Turning it on throws InvalidOperationError, nothing changed, when the wrapped ILossScaler
  /// cannot track it (ILossScaler::SetAmaxTracking() returned false; the built-in scalers can);
  /// turning it off always works.
  void SetAmaxTracking(bool on);
  /// Whether amax tracking is on.
  bool AmaxTracking() const;
  /// The amax of the last finished iteration (Step() or Update()) that unscaled its gradients
  /// while tracking was on; nullopt while tracking is off, before such an iteration (Reset()
  /// starts over), after one that ran disabled or only checked (CheckOverflow() reads
  /// gradients that may be scaled), and after one whose optimizers were not all tracked
  /// (tracking turned on between `Step(o1)` and `Step(o2)`).
  /// On a device the value was read once when the iteration finished.
  std::optional<float> LastAmax() const;

  /// The step index the next finished iteration reports (StepEvent::Step, OverflowReport::Step):
  /// the iterations finished since construction, or since SetStepIndex() counted on from its value.
  std::int64_t StepIndex() const;
  /// Makes @p step the index of the iteration in progress (or the next one, between
  /// iterations), e.g. the framework's global step at the top of its loop; the following
  /// iterations count on from it. A further optimizer joining the iteration `Step(o1)` finished
  /// keeps that iteration's index. ArgumentError naming `step` when negative, nothing changed.
  void SetStepIndex(std::int64_t step);
  /// The order overflow reports list gradients in (names; the framework's registration or
  /// backward order): names not in it come after, in name order. Empty by default (name order).
  void SetGradientOrder(std::vector<std::string> names);
  /// The order set by SetGradientOrder().
  const std::vector<std::string>& GradientOrder() const;

  /// Versioned blob (version 3) of the wrapped scaler's ILossScaler::StateDict(), the iteration
  /// state with its found-inf, GradScaler's own switch and the step index. Works for every
  /// scaler; a custom one saves what its StateDict() saves (by default its scale and enabled flag).
  std::vector<std::byte> StateDict() const;
  /// Restores StateDict(), also a version 2 blob and a version 1 blob of a built-in scaler
  /// (they hold no step index: StepIndex() stays as it is). ArgumentError for a
  /// truncated, corrupted or mismatched blob (one of another scaler kind), and whatever the
  /// scaler's LoadStateDict() throws (InvalidOperationError from the default when it cannot
  /// restore the saved state); the GradScaler and its scaler are unchanged on every error.
  /// **The blob's configuration wins**, as in PyTorch's `GradScaler.load_state_dict` (which
  /// replaces the growth and backoff settings): a dynamic scaler built with another
  /// DynamicScalerConfig takes the saved one (growth and backoff factors, interval, bounds,
  /// hysteresis, enabled flag) with the saved scale and counters, and a static scaler the saved
  /// scale. Build the scaler anew after loading if you want other settings. The blob holds no
  /// gradients: FP32 gradients this scaler already unscaled in place in the current iteration,
  /// gradients a deferring `Step(opt, mode)` stepped in it (and those the previous iteration
  /// stepped) stay refused until the next `Scale(loss)`, as stepping them again would unscale or
  /// step them twice (InvalidOperationError). Loaded between `Step(o1)` and `Step(o2)` of
  /// PyTorch's flow, or after a deferring `Step(o1, mode)` (a blob saved between iterations),
  /// another optimizer can no longer join the iteration o1 stepped in: its gradients were scaled
  /// with the scale the load replaced, so `Step(o2)` and `Unscale(o2)` are an
  /// InvalidOperationError until the next `Scale(loss)`; `Update()` is accepted and changes nothing.
  void LoadStateDict(std::span<const std::byte> state);

 private:
  friend class GradScalerContext;
  struct Impl;
  Impl& Live() const;  // InvalidOperationError for a moved-from GradScaler
  // Step(); *@p committed (when given) turns true once the optimizer stepped and the iteration
  // is committed, before the observers run (an observer's exception comes after it).
  bool StepImpl(IOptimizer& optimizer, StepMode mode, bool* committed = nullptr);
  void AbandonIteration() noexcept;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlframework::amp
