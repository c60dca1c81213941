#pragma once
/// @file GradientConversionLayer.hpp
/// @brief Spec 003: overflow check, unscale, clip by global norm and FP32 conversion of gradients.
///
/// ProcessGradients keeps spec 003's observable order (check overflow, update
/// the scale, skip with an empty map, unscale, clip, convert to FP32) but runs
/// it in two passes over memory with no intermediate tensors, one code path on
/// every backend (the scaler's state lives where the gradients' backend keeps it):
///
/// - without clipping, pass 2 of the 16-bit gradients runs first, with the scale the state holds:
///   it writes FP32 gradients times the inverse scale and its flag ("a non-finite value written",
///   the same as "a non-finite input" for scales >= 1) is their overflow check; FP32 inputs are
///   only checked (for a scale below 1 also whether unscaling would make one of them Inf). The scale update then reads
///   that flag where the state lives, and the result is read once because ShouldSkip must reach the host: one host
///   synchronisation per step on a device. FP32 inputs are scaled in place only when the step is kept.
/// - with clipping, pass 1 reads the gradients once for the non-finite flag and the sum of squares
///   of the unscaled values (CheckAndSumSquares); pass 2 writes FP32 gradients multiplied by
///   inverse-scale times the clip coefficient (CastInto), FP32 inputs scaled in place. On a device
///   the norm and pass 2's flag are read: two synchronisations.

/// Two deliberate differences from the C# text, both in docs/spec-mapping.md:
/// gradients are unscaled by the scale they were produced with (the spec's
/// order would divide by the scale after a growth step), and the norm is that
/// of the exactly unscaled FP32 values (the spec rounds to FP16 in between).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/ITrainingObserver.hpp>
#include <mlframework/core/OverflowReport.hpp>
#include <mlframework/export.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>
#include <mlframework/optimizers/mixed_precision/MixedPrecisionOptions.hpp>
#include <mlframework/optimizers/mixed_precision/PrecisionManager.hpp>

namespace mlframework::optimizers::mixed_precision {

/// Statistics about gradient processing (spec 003's GradientProcessingStats; an aggregate).
struct MLFRAMEWORK_EXPORT GradientProcessingStats {
  float LossScale = 0.0f;                            ///< Current loss scale.
  std::int64_t ClipCount = 0;                        ///< Clipping operations since creation or Reset().
  float LastGradientNorm = 0.0f;                     ///< Global L2 norm of the last unscaled gradients measured.
  bool ClippingEnabled = false;                      ///< EnableGradientClipping from the options.
  float MaxGradNorm = 0.0f;                          ///< MaxGradNorm from the options.
  mixed_precision::LossScalerStats LossScalerStats;  ///< The loss scaler's own statistics.
  DataType TargetPrecision = DataType::Float16;      ///< The precision manager's target precision now.
  bool FellBackToFP32 = false;                       ///< The auto-fallback to FP32 has happened.
  std::int64_t FallbackStep =
      0;  ///< The scaler's step (from 1) on which it happened; 0 before (PrecisionManager::FallbackStep).
  std::int64_t OverflowsAtMinScale = 0;  ///< Overflows in a row at MinLossScale, the fallback's count.

  /// "LossScale: 65536.00, LastGradNorm: 0.0000, ClipCount: 0, ClippingEnabled: False,
  /// MaxGradNorm: 1.00", exactly as spec 003 formats it; after an auto-fallback
  /// ", Fell back to FP32" is appended.
  std::string ToString() const;
};

/// Result of ProcessGradients (the spec's C# tuple): `auto [grads, skip] = layer.ProcessGradients(g);`
/// binds the spec's two elements (a tuple-like type of size 2, see get() below); FellBackToFP32
/// is read by name.
struct GradientProcessingResult {
  GradientMap Gradients;    ///< FP32 gradients for the optimizer; empty when the step is skipped.
  bool ShouldSkip = false;  ///< True when the gradients overflowed and the optimizer step must be skipped.
  /// True on the one call on which the auto-fallback to FP32 happened (always an overflowed,
  /// skipped step). The caller then switches its model to FP32 (PrecisionManager::FP32Parameters,
  /// see PrecisionManager.hpp) and keeps calling ProcessGradients.
  bool FellBackToFP32 = false;
};

/// Element @p I of a GradientProcessingResult for structured bindings: 0 is Gradients, 1 is
/// ShouldSkip (the spec's tuple), with the value category of @p result.
// The tuple protocol of structured bindings looks up exactly the name 'get'.
// NOLINTBEGIN(readability-identifier-naming)
template <std::size_t I, typename Result>
requires std::same_as<std::remove_cvref_t<Result>, GradientProcessingResult>
constexpr decltype(auto) get(Result&& result) noexcept {
  static_assert(I < 2, "GradientProcessingResult binds two elements: Gradients and ShouldSkip");
  if constexpr (I == 0) {
    return (std::forward<Result>(result).Gradients);
  } else {
    return (std::forward<Result>(result).ShouldSkip);
  }
}
// NOLINTEND(readability-identifier-naming)

/// Gradient precision management, loss scaling and clipping for mixed-precision training (spec 003).
/// Movable: a moved-from layer throws InvalidOperationError from every member that needs its scaler
/// or precision manager; it can be destroyed or assigned to.
class MLFRAMEWORK_EXPORT GradientConversionLayer {
 public:
  /// Layer over a shared scaler and precision manager (C# references become shared pointers).
  /// ArgumentNullError for a null @p lossScaler or @p precisionManager; ArgumentError when
  /// @p options is invalid.
  GradientConversionLayer(const MixedPrecisionOptions& options, std::shared_ptr<DynamicLossScaler> lossScaler,
                          std::shared_ptr<PrecisionManager> precisionManager);
  /// Layer with its own scaler and precision manager built from @p options.
  explicit GradientConversionLayer(const MixedPrecisionOptions& options);
  /// Layer for MixedPrecisionOptions::ForFP16().
  GradientConversionLayer();

  /// Current loss scale factor.
  float CurrentScale() const;
  /// CurrentScale() under spec 003's name (`LossScale` property).
  float LossScale() const { return CurrentScale(); }
  /// Number of gradient clipping operations performed.
  std::int64_t ClipCount() const noexcept { return clip_count_; }
  /// Global L2 norm of the last unscaled gradients measured for clipping.
  float LastGradientNorm() const noexcept { return last_gradient_norm_; }
  /// The loss scaler (shared).
  const std::shared_ptr<DynamicLossScaler>& LossScaler() const;
  /// The precision manager (shared).
  const std::shared_ptr<PrecisionManager>& Precision() const;
  /// The options of this layer.
  const MixedPrecisionOptions& Options() const noexcept { return options_; }

  /// The full pipeline: check overflow, update the scale (and the auto-fallback), skip with an
  /// empty map on overflow, else unscale, clip (if enabled and MaxGradNorm > 0; never for an Inf or
  /// NaN norm, which only a scaler that checks nothing lets through) and convert to FP32,
  /// in two passes over memory. FP32 inputs are unscaled and clipped in place and returned as they
  /// are; FP16/BF16 inputs get FP32 outputs, whose buffers the layer reuses once the caller no
  /// longer holds them (it keeps the last two calls' buffers, so an optimizer that holds one
  /// step's gradients until the next SetGradients still gets its buffers reused). As in spec 003,
  /// a scaler disabled in the options (the BF16/FP32 recipes) reports no overflow, so the step is
  /// never skipped then. After the auto-fallback to FP32 the scale is 1 but the overflow check
  /// goes on: a step with a non-finite gradient is skipped (ShouldSkip, empty map), so no Inf or
  /// NaN reaches the optimizer. The call on which the fallback happens returns FellBackToFP32 (see
  /// PrecisionManager.hpp for the trigger and what the caller does next). ArgumentNullError
  /// naming a null entry, ArgumentError naming an FP8 one and its dtype (loss scaling refuses
  /// FP8), state unchanged.
  GradientProcessingResult ProcessGradients(const GradientMap& gradients);

  /// Scales @p loss before the backward pass (the scaler's ScaleLoss). ArgumentNullError for null.
  TensorPtr ScaleLoss(const TensorPtr& loss) const;

  /// Clips already unscaled @p gradients to MaxGradNorm: measures the global L2 norm (stored in
  /// LastGradientNorm()) and, when it exceeds MaxGradNorm, returns new tensors (same dtypes) times
  /// MaxGradNorm / (norm + 1e-6) and counts a clip; otherwise returns @p gradients. An Inf or
  /// NaN norm (a non-finite gradient) is recorded but not clipped: @p gradients are returned.
  /// Returns @p gradients untouched when clipping is disabled or MaxGradNorm <= 0.
  GradientMap ClipGradients(const GradientMap& gradients);

  /// Turns amax tracking (headroom telemetry) on or off; off by default. It is tracked on the
  /// layer's scaler (shared: DynamicLossScaler::SetAmaxTracking()). While on, ProcessGradients()
  /// also takes the largest finite absolute value of the unscaled gradients (max|g| / scale, what
  /// the optimizer receives) in the passes that check them: the fused unscale of the 16-bit
  /// gradients and the read-only check of the FP32 ones (their amax times 1 / scale). Inf and NaN
  /// are left out, so a skipped step still reports the amax of its finite values. With clipping
  /// active the check pass computes the norm, so the amax comes from the pass that writes the
  /// clipped FP32 gradients, divided by the clip coefficient (the unclipped amax to within
  /// rounding); a step that pass 1 skips has none then. While off, the kernels are the plain ones.
  void SetAmaxTracking(bool on);
  /// Whether amax tracking is on.
  bool AmaxTracking() const noexcept { return amax_tracking_; }
  /// The amax of the last ProcessGradients() that checked its gradients while tracking was on;
  /// nullopt otherwise (tracking off, before such a call, a step skipped with clipping active,
  /// checking off in the options).
  std::optional<float> LastAmax() const noexcept { return last_amax_; }

  /// Snapshot of the gradient processing.
  GradientProcessingStats GetStats() const;

  /// Clears ClipCount(), LastGradientNorm(), LastOverflow() and resets the loss scaler (a
  /// fallback stays in force; observers stay registered).
  void Reset();

  /// The report of the most recent ProcessGradients() step that was skipped for non-finite
  /// gradients (since construction or Reset()), else nullopt. Built only on such steps, by one
  /// more read of the checked gradients: without clipping the FP32 values pass 2 wrote (FP16/BF16
  /// inputs) and the FP32 inputs, with clipping the inputs, under their GradientMap names. The
  /// reference stays valid until the next skipped step. A scaler disabled in the options checks
  /// nothing, so it reports nothing. On a device the scan waits for the device, so the report is
  /// built there only while an observer is registered (the layer's one synchronisation per step
  /// holds without one).
  const std::optional<OverflowReport>& LastOverflow() const noexcept { return last_overflow_; }
  /// Registers @p observer (ITrainingObserver). ProcessGradients() calls it after the step is
  /// committed (scale update, fallback, counters, outputs): overflow, skipped step, backoff or
  /// growth, fallback to FP32 (when PrecisionManager::CheckFallback() falls back on this step),
  /// clipping (norm before clipping, coefficient), OnStep (with the norm when clipping measured
  /// it). An observer's exception reaches the caller after every observer ran; the step's state is
  /// committed but its gradients are not returned (treat the step as skipped). On a device, a
  /// layer with observers reads the scale before and after the update. ArgumentNullError
  /// ("observer") for null, ArgumentError when already registered; nothing changes on error.
  void AddObserver(std::shared_ptr<ITrainingObserver> observer);
  /// Unregisters @p observer; false when it was not registered. ArgumentNullError("observer") for null.
  bool RemoveObserver(const std::shared_ptr<ITrainingObserver>& observer);
  /// The step index the next ProcessGradients() step reports (StepEvent::Step,
  /// OverflowReport::Step): the steps since construction, or counted on from SetStepIndex().
  std::int64_t StepIndex() const noexcept { return steps_; }
  /// Makes @p step the index of the next ProcessGradients() step (e.g. the framework's global
  /// step); the following steps count on from it. Saved by StateDict(). ArgumentError naming
  /// `step` when negative, nothing changed.
  void SetStepIndex(std::int64_t step);
  /// The order overflow reports list gradients in (names; the framework's registration or
  /// backward order): names not in it come after, in name order. Empty by default (name order).
  void SetGradientOrder(std::vector<std::string> names);
  /// The order set by SetGradientOrder().
  const std::vector<std::string>& GradientOrder() const noexcept { return gradient_order_; }

  /// Versioned, checksummed blob (version 2) of everything a resumed run needs: ClipCount(),
  /// LastGradientNorm(), the step index, the loss scaler's state and the precision manager's
  /// fallback state. LoadStateDict() also takes version 1 (no step index: StepIndex() stays).
  std::vector<std::byte> StateDict() const;
  /// Restores a blob from StateDict(). ArgumentError naming `state` for a corrupt or foreign blob
  /// (or one the scaler or manager rejects); the layer, its scaler and its manager are unchanged on error.
  void LoadStateDict(std::span<const std::byte> state);

 private:
  // The scaler and the precision manager: InvalidOperationError once the layer was moved from
  // (a move leaves both pointers null), for every member that uses them.
  DynamicLossScaler& Scaler() const;
  PrecisionManager& Manager() const;
  // EnableGradientClipping and MaxGradNorm > 0.
  bool ClippingActive() const noexcept;
  // Records the norm sqrt(@p sum_of_squares); when it is finite and exceeds MaxGradNorm counts a
  // clip, sets @p clipped and returns the clip coefficient, else returns 1. Double because the
  // coefficient for a norm above FLT_MAX is below FLT_MIN (but not 0).
  double ClipCoefficient(double sum_of_squares, bool& clipped);
  // An FP32 output buffer kept for gradient @p name (from the last call or the one before) that
  // still fits @p like and that nobody else holds; null otherwise.
  TensorPtr ReusableOutput(const std::string& name, const ITensor& like) const;
  // Fills the null entries of @p low_dst with new FP32 outputs shaped like @p low_src.
  static void AllocateOutputs(std::span<const TensorPtr> low_src, std::span<TensorPtr> low_dst);
  // Makes @p buffers (this call's FP32 outputs) the last call's, the rest of the previous ones the spares.
  void KeepOutputBuffers(GradientMap buffers);

  MixedPrecisionOptions options_;
  std::shared_ptr<DynamicLossScaler> loss_scaler_;
  bool amax_tracking_ = false;
  std::optional<float> last_amax_;
  std::shared_ptr<PrecisionManager> precision_manager_;
  std::int64_t clip_count_ = 0;
  float last_gradient_norm_ = 0.0f;
  // The FP32 outputs of the last call, and those of the call before that the last call did not
  // reuse. Two generations because a caller typically holds the last call's outputs (an
  // optimizer's SetGradients) while the next call runs: the one before is then free again.
  GradientMap output_buffers_;
  GradientMap spare_buffers_;
  std::int64_t steps_ = 0;                   // ProcessGradients() steps finished: the step index of events and reports
  std::vector<std::string> gradient_order_;  // SetGradientOrder(): the reports' order
  std::optional<OverflowReport> last_overflow_;
  std::vector<std::shared_ptr<ITrainingObserver>> observers_;
};

}  // namespace mlframework::optimizers::mixed_precision

/// GradientProcessingResult is tuple-like with the spec's two elements (Gradients, ShouldSkip).
template <>
struct std::tuple_size<mlframework::optimizers::mixed_precision::GradientProcessingResult>
    : std::integral_constant<std::size_t, 2> {};
/// Element 0: the gradients.
template <>
struct std::tuple_element<0, mlframework::optimizers::mixed_precision::GradientProcessingResult> {
  using type = mlframework::GradientMap;  ///< The type of GradientProcessingResult::Gradients.
};
/// Element 1: whether to skip the step.
template <>
struct std::tuple_element<1, mlframework::optimizers::mixed_precision::GradientProcessingResult> {
  using type = bool;  ///< The type of GradientProcessingResult::ShouldSkip.
};
