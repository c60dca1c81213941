#pragma once
/// @file GradScaler.hpp
/// @brief The high-level mixed-precision API: scale the loss, unscale, skip on overflow, adapt the scale.

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/amp/ILossScaler.hpp>
#include <mlframework/amp/IOptimizer.hpp>
#include <mlframework/core/ITensor.hpp>
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
/// | deferred | `Scale(loss)`, backward, `Step(opt, false)`, `opt.Step()` if it returned true, `Update()` |
/// | manual (spec 004) | `Scale(loss)`, backward, `Unscale(grads)`, `CheckOverflow(grads)`, your step, `Update()` |
/// | RAII | `GradScalerContext ctx(scaler, loss)`, backward, `ctx.Step(opt)` |
///
/// State machine of one iteration:
/// - **ready**: nothing recorded. `Unscale`, `CheckOverflow`, `Step` start the iteration.
/// - **unscaled**: `Unscale` ran (found-inf recorded from the fused pass). A second `Unscale`
///   is an InvalidOperationError; `Step` reuses the unscaled gradients when they are the
///   optimizer's (the gradient-clipping flow) and is an error otherwise.
/// - **checked**: `CheckOverflow` recorded found-inf (ORed over calls; asking again about
///   gradients this iteration already unscaled returns the recorded flag without a pass).
/// - **stepped**: `Step(opt, false)` ran; only `Update()` may follow (another `Step` is an error).
/// - `Update()` (or `Step(opt)`) applies `UpdateScale(found_inf)` once and returns to ready.
///   `Update()` with no found-inf recorded is an InvalidOperationError.
/// - `Scale(loss)` starts the next iteration. If the previous one recorded a result but never
///   called `Update()` (spec 004's manual flow skips it on overflow), that result is applied
///   first, so an overflow still backs the scale off exactly once.
/// - An abandoned iteration (a GradScalerContext destroyed without a step) is dropped: no
///   scale update, the next iteration starts at ready.
/// - Stepping or unscaling again, without a new `Scale(loss)`, the very gradients the previous
///   iteration already unscaled is an InvalidOperationError (they would be unscaled twice).
///
/// Every error leaves the scaler unchanged.
///
/// **Unscaling** multiplies by the inverse scale (computed in double). FP32 gradients are
/// unscaled in place with one fused unscale-and-check pass, so the optimizer's own tensors
/// change; FP16/BF16 gradients are unscaled into FP32 tensors (one fused cast pass) owned by
/// the scaler and reused by the next iteration, and `Step` hands those to the optimizer with
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
///   `CheckOverflow()` reads it to return its bool;
/// - when asked: `Scale()`, `GetStats()`, `GetScaleTensor()`, `StateDict()` (which also reads a
///   pending found-inf), `Reset()` (writes the state), the first device iteration (creates it).
///
/// A static or custom scaler on a device reads the overflow flag at unscale time (TensorBackend).
///
/// **Disabled**, the scaler passes the loss and gradients through unchanged, never reports
/// overflow and never skips a step. Enable()/Disable() belong between iterations.
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
  const std::shared_ptr<ILossScaler>& Scaler() const noexcept;
  /// The current scaling factor.
  float Scale() const;
  /// Whether scaling is applied.
  bool Enabled() const;

  /// The loss times the scale (the loss itself when disabled); starts an iteration (see the class notes).
  /// ArgumentNullError("loss") when null.
  TensorPtr Scale(const TensorPtr& loss);
  /// Unscales the optimizer's gradients, hands them back with SetGradients, and (when
  /// @p optimizerStep) steps the optimizer and updates the scale. With @p optimizerStep false,
  /// neither the optimizer step nor the scale update happens: call `optimizer.Step()` if this
  /// returned true, then Update(). Returns false when the gradients overflowed (step skipped).
  bool Step(IOptimizer& optimizer, bool optimizerStep = true);
  /// Unscales @p gradients (FP32 in place, FP16/BF16 into FP32) and records overflow for this
  /// iteration; InvalidOperationError when this iteration already unscaled.
  GradientMap Unscale(const GradientMap& gradients);
  /// Applies the recorded overflow result to the scale and ends the iteration;
  /// InvalidOperationError when no overflow check was recorded.
  void Update();
  /// True when any of @p gradients holds Inf or NaN (false when disabled); records it for this iteration.
  bool CheckOverflow(const GradientMap& gradients);
  /// Enables scaling (between iterations; InvalidOperationError mid-iteration).
  void Enable();
  /// Disables scaling (between iterations; InvalidOperationError mid-iteration).
  void Disable();
  /// Dynamic scaler: back to the initial scale, counters cleared. Every scaler: iteration state cleared.
  void Reset();
  /// The factor the loss is multiplied by, as an FP32 scalar (1 when disabled), cached until it changes.
  TensorPtr GetScaleTensor();
  /// Statistics of the dynamic scaler; empty for a static or custom scaler.
  std::optional<DynamicScalerStats> GetStats() const;

  /// Versioned blob of the wrapped built-in scaler and the iteration state.
  /// InvalidOperationError for a custom scaler (save its state yourself).
  std::vector<std::byte> StateDict() const;
  /// Restores StateDict(); ArgumentError for a truncated, corrupted or mismatched blob (state unchanged).
  void LoadStateDict(std::span<const std::byte> state);

 private:
  friend class GradScalerContext;
  struct Impl;
  bool StepImpl(IOptimizer& optimizer, bool run_optimizer, bool update_scale);
  void AbandonIteration() noexcept;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlframework::amp
