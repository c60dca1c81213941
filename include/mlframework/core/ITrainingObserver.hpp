#pragma once
/// @file ITrainingObserver.hpp
/// @brief Callbacks for what the mixed-precision front ends decide on each step.

#include <cstdint>
#include <optional>

#include <mlframework/core/OverflowReport.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// One finished step of a front end, the last callback of the step (ITrainingObserver::OnStep).
struct StepEvent {
  std::int64_t Step = 0;                   ///< The front end's step index (0 for its first step).
  float LossScale = 0.0f;                  ///< The scale the step's gradients were produced with.
  float NewLossScale = 0.0f;               ///< The scale after the step's update.
  bool Skipped = false;                    ///< The optimizer step was skipped (non-finite gradients).
  std::optional<float> GradientNorm = {};  ///< Global L2 norm of the unscaled gradients, when measured.
  /// Largest finite absolute value of the unscaled gradients (the front end's LastAmax()), while
  /// its amax tracking is on; HeadroomBits() turns it into the bits left before overflow.
  std::optional<float> GradientAmax = {};
  /// The step's report when it overflowed, else null. Also null on a skipped step whose gradients
  /// could not be scanned: a found-inf restored by LoadStateDict() comes without its gradients.
  const OverflowReport* Overflow = nullptr;
  /// The lowest scale the front end's scaler may reach (its configured minimum), when it has one;
  /// OverflowLogger writes a line when NewLossScale gets there.
  std::optional<float> MinLossScale = {};
};

/// Observer of GradScaler (and so GradScalerContext), GradientConversionLayer and
/// FSDPMixedPrecisionManager: register it with their AddObserver().
///
/// Every callback has an empty default, so an observer overrides only what it needs. A front
/// end with no observer registered builds no event: no allocation and no virtual call on its
/// hot path (for host gradients an overflow report is still built on overflow steps, for
/// LastOverflow(); for device gradients only while an observer is registered, since the scan
/// waits for the device).
///
/// **When.** Callbacks run at the end of the front-end call that finishes a step, after the
/// front end has committed its state (scale, counters, LastOverflow()), in this order:
/// OnOverflow, OnSkippedStep, OnScaleBackoff or OnScaleGrowth, OnFallbackToFP32, OnClipping,
/// OnStep; each callback goes to every observer in registration order before the next callback.
///
/// **Exceptions.** An observer that throws does not stop the others: the remaining callbacks of
/// the step still run for every observer, then the first exception is rethrown to the caller of
/// the front-end method. The front end's state is already committed, so it stays consistent
/// and the next step runs normally; what the throwing call would have returned is lost
/// (GradientConversionLayer::ProcessGradients' gradients: treat the step as skipped).
///
/// **From a callback** an observer may add or remove observers (the step's callbacks still go to
/// those registered when it finished) and call the front end, e.g. Reset() when the scale
/// collapses: the report the callbacks receive is the observers' own copy, valid until the last
/// callback of the step returns, whatever the front end does with its LastOverflow().
///
/// **On a device**, a front end with observers reads the scale before and after its update and,
/// on overflow steps, waits for the report's scan (host synchronisations it does not need
/// without observers).
class MLFRAMEWORK_EXPORT ITrainingObserver {
 public:
  virtual ~ITrainingObserver();

  /// The step's gradients held Inf or NaN; @p report lists them.
  virtual void OnOverflow(const OverflowReport& report);
  /// The optimizer step @p step was skipped; the gradients were produced with @p loss_scale.
  virtual void OnSkippedStep(std::int64_t step, float loss_scale);
  /// The scale grew from @p old_scale to @p new_scale after @p step.
  virtual void OnScaleGrowth(std::int64_t step, float old_scale, float new_scale);
  /// The scale backed off from @p old_scale to @p new_scale after @p step.
  virtual void OnScaleBackoff(std::int64_t step, float old_scale, float new_scale);
  /// GradientConversionLayer fell back to FP32 at @p step (the precision manager's auto-fallback);
  /// from now on the scale is 1 and steps with non-finite gradients are still skipped.
  virtual void OnFallbackToFP32(std::int64_t step);
  /// The gradients of @p step were clipped: their global norm was @p norm_before_clipping and
  /// they were multiplied by @p coefficient.
  virtual void OnClipping(std::int64_t step, float norm_before_clipping, float coefficient);
  /// The step is finished (every step, clean or not; last callback of the step).
  virtual void OnStep(const StepEvent& event);

 protected:
  ITrainingObserver() = default;
  ITrainingObserver(const ITrainingObserver&) = default;
  ITrainingObserver& operator=(const ITrainingObserver&) = default;
};

}  // namespace mlframework
