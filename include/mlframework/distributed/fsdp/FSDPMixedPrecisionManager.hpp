#pragma once
/// @file FSDPMixedPrecisionManager.hpp
/// @brief Casts, loss scaling and rank-agreed overflow decisions for FSDP (spec 002).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionConfig.hpp>
#include <mlframework/export.hpp>

namespace mlframework::amp::detail {
class ScaleStateOwner;
}  // namespace mlframework::amp::detail

namespace mlframework::distributed::fsdp {

/// Mixed-precision operations of one FSDP instance.
///
/// The loss scale follows the shared rules (amp::UpdateScaleState). The overflow decision is a
/// collective: the local found-inf flag is combined with an all-reduce MAX over the FSDP
/// process group before the scale changes, so all ranks skip the same steps and keep equal
/// scales. Casts run through the fused multi-tensor cast kernel.
///
/// On a device (gradients of a DeviceScalingBackend, e.g. CUDA tensors) the scale state moves to
/// the gradients' device on first use and stays there (the single owner, as in
/// amp::DynamicLossScaler): the check or unscale writes the device found-inf flag. With an NCCL
/// process group the ranks agree on the device: the flag becomes a one-element FP32 device tensor
/// (DeviceScalingBackend::FlagToTensor) that is all-reduced with MAX through
/// IProcessGroup::AllReduce and written back, and the scale update runs there: the flag never
/// passes through host memory and no AllReduceHost runs. NcclProcessGroup::AllReduce on a
/// device tensor returns once enqueued (its watchdog catches NCCL errors and timeouts; with
/// NcclProcessGroupOptions::Blocking it waits), and the agreed decision is read once because
/// CheckOverflow() returns it. With
/// any other group (MPI, local) the local flag is read and agreed with AllReduceHost, as for host
/// tensors. CurrentLossScale(), StepsSinceOverflow(), State() and StateDict() read the device
/// state (cached until the next update); ResetLossScale() and LoadStateDict() write it.
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
  /// A new tensor holding `loss * CurrentLossScale()`, or @p loss itself without loss scaling.
  /// ArgumentNullError for null.
  TensorPtr ScaleLoss(const TensorPtr& loss) const;
  /// Collective: true when any rank's @p gradients (null entries skipped) hold Inf or NaN; then
  /// updates the scale by the shared rules. Always false without loss scaling.
  bool CheckOverflow(const GradientMap& gradients);
  /// Collective: multiplies @p gradients in place by `1 / CurrentLossScale()` and checks them in
  /// the same pass, agrees across ranks and updates the scale like CheckOverflow(). Without loss
  /// scaling the gradients are left as they are and only checked.
  bool UnscaleAndCheckOverflow(const GradientMap& gradients);
  /// The current loss scale.
  float CurrentLossScale() const;
  /// Clean steps since the last overflow or growth.
  std::int64_t StepsSinceOverflow() const;
  /// The full scaling state (counters included).
  amp::ScaleState State() const;
  /// The device-resident state while a device owns it, else null.
  DeviceScaleState* DeviceState() const noexcept;
  /// Back to InitialLossScale with cleared counters.
  void ResetLossScale();
  /// The configuration.
  const FSDPMixedPrecisionConfig& Config() const noexcept;

  /// Versioned blob of the scaling state.
  std::vector<std::byte> StateDict() const;
  /// Restores a blob from StateDict(); ArgumentError for a corrupted blob (state unchanged).
  void LoadStateDict(std::span<const std::byte> state);

 private:
  TensorPtr CastTensor(const TensorPtr& tensor, TensorDataType targetDType) const;
  bool Decide(bool local_overflow);
  bool DecideOnDevice(const DeviceScalingBackend& backend);

  FSDPMixedPrecisionConfig config_;
  amp::ScalePolicy policy_;
  FSDP& fsdp_;
  std::unique_ptr<amp::detail::ScaleStateOwner> owner_;  // the single owner of the scale state
  TensorPtr flag_tensor_;                                // the found-inf flag, all-reduced on the device
};

}  // namespace mlframework::distributed::fsdp
