#pragma once
/// @file FSDPMixedPrecisionManager.hpp
/// @brief Casts, loss scaling and rank-agreed overflow decisions for FSDP (spec 002).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/ITrainingObserver.hpp>
#include <mlframework/core/OverflowReport.hpp>
#include <mlframework/core/ScalePolicy.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionConfig.hpp>
#include <mlframework/export.hpp>

namespace mlframework::detail {
class ScaleStateOwner;
}  // namespace mlframework::detail

namespace mlframework::distributed::detail {
class LocalCheck;
}  // namespace mlframework::distributed::detail

namespace mlframework::distributed::fsdp {

/// Mixed-precision operations of one FSDP instance.
///
/// The loss scale follows the shared rules (UpdateScaleState, core/ScalePolicy.hpp). The overflow decision is a
/// collective: the local found-inf flag is combined with an all-reduce MAX over the FSDP
/// process group before the scale changes, so all ranks skip the same steps and keep equal
/// scales. Casts run through the fused multi-tensor cast kernel.
///
/// The scale state lives where the gradients' scaling backend keeps it (core/DeviceScaling.hpp),
/// one code path for all: in host memory for CPU tensors; on a device (e.g. CUDA tensors) it
/// moves to the gradients' device on first use and stays there (the single owner, as in
/// amp::DynamicLossScaler). The check or unscale writes the state's found-inf flag. With an NCCL
/// process group the ranks agree where the state lives: the flag becomes a one-element FP32 tensor
/// (DeviceScalingBackend::FlagToTensor) that is all-reduced with MAX through
/// IProcessGroup::AllReduce and written back, and the scale update runs there: the flag never
/// passes through host memory and no AllReduceHost runs. NcclProcessGroup::AllReduce on a
/// device tensor returns once enqueued (its watchdog catches NCCL errors and timeouts; with
/// NcclProcessGroupOptions::Blocking it waits), and the agreed decision is read once because
/// CheckOverflow() returns it. With
/// any other group (MPI, local) the local flag is read and agreed with AllReduceHost, as for host
/// tensors. CurrentScale(), StepsSinceLastOverflow(), State() and StateDict() read the device
/// state (cached until the next update); ResetLossScale() and LoadStateDict() write it.
///
/// **Overflow reports** are a collective, so they are opt-in: with SetOverflowReports(true), or
/// while an observer is registered, a step that the ranks agree overflowed makes every rank scan
/// its own gradients once more (ScanNonFinite; on a device that waits for it) and agree the
/// per-gradient results in two host all-reduces over fixed-size arrays (SUM of the counts; MAX
/// of the NaN/+Inf/-Inf flags, of "rank r saw non-finite values" and of the negated first
/// index), so every rank holds the same LastOverflow(): the names, the counts summed over the
/// ranks, the smallest first index, the kinds and the ranks. All ranks must pass gradient maps
/// with the same names (as FSDP's units give them; a null entry counts as finite). With an MPI or
/// local group one rank's opt-in is enough (an observer on rank 0 only, to log there): the opt-in
/// rides in the flag's all-reduce and every rank builds the report when any rank opted in. With
/// an NCCL group the flag is agreed on the device only, so opt in alike on every rank (the same
/// SetOverflowReports() value, observers on every rank or on none). Clean steps run none of this,
/// and without the opt-in an overflow step costs exactly what it did (the decision's one read and
/// one agreement).
///
/// **Refused arguments** (an FP8 gradient, gradients on two devices) are refused before any
/// gradient is read or changed. With an MPI or local group the refusal rides in the flag's
/// all-reduce, so every rank throws when any rank refuses (the others an error of the same type
/// naming that rank), no scale changes and the step index stays; UnscaleAndCheckOverflow() has
/// then already unscaled the gradients of the ranks that accepted theirs (the step is abandoned:
/// skip it). With an NCCL group no host all-reduce runs, so the refusal is this rank's only:
/// pass gradients of the same dtypes and device on every rank (FSDP's units give them). The step index counts the calls
/// of CheckOverflow() and UnscaleAndCheckOverflow() that checked (from 0).
///
/// **Observers** (ITrainingObserver) are called by those calls after the scale update:
/// overflow, skipped step, backoff or growth, OnStep (the scale is read before and after the
/// update). An observer's exception reaches the caller after every observer ran; the state is
/// committed.
class MLFRAMEWORK_EXPORT FSDPMixedPrecisionManager {
 public:
  /// Validates @p config (ArgumentError naming the field) and starts at InitialLossScale.
  /// @p fsdp must outlive the manager.
  FSDPMixedPrecisionManager(FSDPMixedPrecisionConfig config, FSDP& fsdp);
  /// Releases nothing beyond its own state (the spec's Dispose).
  ~FSDPMixedPrecisionManager();
  /// Not copyable: one scale state per FSDP.
  FSDPMixedPrecisionManager(const FSDPMixedPrecisionManager&) = delete;
  /// Not assignable.
  FSDPMixedPrecisionManager& operator=(const FSDPMixedPrecisionManager&) = delete;

  /// @p gatheredParam in ForwardDType (the same tensor when it already is, or when mixed
  /// precision is disabled). ArgumentNullError for null.
  TensorPtr ConvertToMixedPrecision(const TensorPtr& gatheredParam) const;
  /// @p mixedPrecisionGrad in BackwardDType (FP32; the same tensor when it already is).
  /// ArgumentNullError for null.
  TensorPtr ConvertGradientToFP32(const TensorPtr& mixedPrecisionGrad) const;
  /// A new tensor holding `loss * CurrentScale()`, or @p loss itself without loss scaling.
  /// ArgumentNullError for null.
  TensorPtr ScaleLoss(const TensorPtr& loss) const;
  /// Collective: true when any rank's @p gradients (null entries skipped) hold Inf or NaN; then
  /// updates the scale by the shared rules. Always false without loss scaling. ArgumentError
  /// naming an FP8 gradient and its dtype (loss scaling refuses FP8), nothing changed.
  bool CheckOverflow(const GradientMap& gradients);
  /// Collective: multiplies @p gradients in place by `1 / CurrentScale()` and checks them in
  /// the same pass, agrees across ranks and updates the scale like CheckOverflow(). Without loss
  /// scaling the gradients are left as they are and only checked: true when any rank's gradients
  /// hold Inf or NaN (one read and a host all-reduce MAX; no scale changes). FP8 gradients as
  /// CheckOverflow().
  bool UnscaleAndCheckOverflow(const GradientMap& gradients);
  /// The current loss scale.
  float CurrentScale() const;
  /// CurrentScale() under spec 002's name (`CurrentLossScale` property).
  float CurrentLossScale() const { return CurrentScale(); }
  /// Clean steps since the last overflow or growth.
  std::int64_t StepsSinceLastOverflow() const;
  /// The full scaling state (counters included).
  ScaleState State() const;
  /// The state while it lives in device memory, else null.
  DeviceScaleState* DeviceState() const noexcept;
  /// Back to InitialLossScale with cleared counters; LastOverflow() cleared.
  void ResetLossScale();
  /// The configuration.
  const FSDPMixedPrecisionConfig& Config() const noexcept;

  /// The agreed report of the most recent step that overflowed on any rank while reports were on
  /// (the same on every rank; see the class notes), or nullopt when none has since construction
  /// or ResetLossScale(). The reference stays valid until the next reported step.
  const std::optional<OverflowReport>& LastOverflow() const noexcept { return last_overflow_; }
  /// Turns overflow reports on or off without an observer (see the class notes; every rank alike).
  void SetOverflowReports(bool enabled) noexcept;
  /// Whether SetOverflowReports(true) is in force (observers turn reports on as well).
  bool OverflowReports() const noexcept;
  /// Registers @p observer (see the class notes; reports are on while one is registered). ArgumentNullError("observer")
  /// for null, ArgumentError when already registered; nothing changes on error.
  void AddObserver(std::shared_ptr<ITrainingObserver> observer);
  /// Unregisters @p observer; false when it was not registered. ArgumentNullError("observer") for null.
  bool RemoveObserver(const std::shared_ptr<ITrainingObserver>& observer);
  /// Turns amax tracking (headroom telemetry) on or off; off by default (call it on every rank
  /// alike: it changes what the agreement collective carries). While on,
  /// UnscaleAndCheckOverflow() also takes the largest finite absolute value of the unscaled
  /// gradients (max|g| / scale) in its fused pass, and the ranks agree on the largest one in the
  /// same MAX all-reduce as the overflow flag (a two-element flag tensor on NCCL, two host values
  /// otherwise): no extra collective. Inf and NaN are left out, so an overflowing step still
  /// reports the amax of its finite values. While off, the kernels are the plain ones.
  void SetAmaxTracking(bool on);
  /// Whether amax tracking is on.
  bool AmaxTracking() const noexcept;
  /// The amax agreed by the last UnscaleAndCheckOverflow() that ran while tracking was on (the
  /// same on every rank); nullopt while tracking is off and before such a step. CheckOverflow()
  /// takes none (its gradients may still be scaled). On a device the value was read once when
  /// the step agreed.
  std::optional<float> LastAmax() const noexcept;

  /// The step index the next checking call reports (StepEvent::Step, OverflowReport::Step): the
  /// checking calls since construction, or counted on from SetStepIndex().
  std::int64_t StepIndex() const noexcept { return steps_; }
  /// Makes @p step the index of the next checking call (e.g. the framework's global step; the
  /// same on every rank); the following calls count on from it. Saved by StateDict().
  /// ArgumentError naming `step` when negative, nothing changed.
  void SetStepIndex(std::int64_t step);
  /// The order overflow reports list gradients in (names; the framework's registration or
  /// backward order; the same on every rank): names not in it come after, in name order.
  /// Empty by default (name order).
  void SetGradientOrder(std::vector<std::string> names);
  /// The order set by SetGradientOrder().
  const std::vector<std::string>& GradientOrder() const noexcept { return gradient_order_; }

  /// Versioned blob (version 2) of the scaling state and the step index.
  std::vector<std::byte> StateDict() const;
  /// Restores a blob from StateDict(), also a version 1 blob (no step index: StepIndex() stays);
  /// ArgumentError for a corrupted blob (state unchanged).
  void LoadStateDict(std::span<const std::byte> state);

 private:
  TensorPtr CastTensor(const TensorPtr& tensor, TensorDataType targetDType) const;
  // Agrees on the recorded flag across ranks (MAX), advances the scale with the agreed decision
  // and returns it; throws on every rank when @p local failed on any (host agreements; NCCL:
  // on this rank), nothing changed. @p call names the caller.
  bool Agree(const distributed::detail::LocalCheck& local, const char* call);
  // After an agreed overflow: every rank's scan of @p gradients, agreed into one report (collective).
  OverflowReport AgreedReport(const GradientMap& gradients, float scale) const;
  // Whether a step builds a report on overflow: SetOverflowReports(true) or an observer.
  bool Reporting() const noexcept;
  // Commits the step: the report on overflow, the step index, then the observers.
  bool FinishStep(const GradientMap& gradients, bool overflow, float old_scale,
                  std::optional<float> amax = std::nullopt);

  FSDPMixedPrecisionConfig config_;
  ScalePolicy policy_;
  FSDP& fsdp_;
  std::unique_ptr<mlframework::detail::ScaleStateOwner> owner_;  // the single owner of the scale state
  TensorPtr flag_tensor_;                    // the found-inf flag, all-reduced where the state lives (NCCL)
  std::int64_t steps_ = 0;                   // checking calls finished: the step index of reports and events
  std::vector<std::string> gradient_order_;  // SetGradientOrder(): the reports' order
  bool reports_ = false;                     // SetOverflowReports()
  std::optional<OverflowReport> last_overflow_;
  std::vector<std::shared_ptr<ITrainingObserver>> observers_;
  bool amax_tracking_ = false;
  std::optional<float> last_amax_;        // LastAmax()
  std::optional<float> agreed_amax_;      // what the last Agree() agreed, while tracking
  std::optional<bool> agreed_reporting_;  // whether any rank opted in to reports, when agreed with the flag
};

}  // namespace mlframework::distributed::fsdp
