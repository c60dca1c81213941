#pragma once
/// @file DeviceScaling.hpp
/// @brief Optional backend extension: dynamic loss scaling whose state stays in device memory.
///
/// On a GPU, reading the found-inf flag back to the host after every unscale
/// and deciding the new scale on the host costs a host synchronisation per
/// step. A backend that implements DeviceScalingBackend keeps the whole
/// scaler state (ScaleState, the policy and the found-inf flag) in
/// device memory instead, in the style of Apex / torch.cuda.amp:
///
/// 1. ScaleWithState() multiplies the loss by the scale read on the device;
/// 2. UnscaleWithState() / CastUnscaledWithState() multiply gradients by the
///    inverse scale read on the device and OR "any non-finite value written"
///    into the device flag (CheckWithState() only reads);
/// 3. UpdateScale() runs UpdateScaleState() (the same function every
///    front-end uses on the host) in a one-thread kernel, records whether the
///    step must be skipped, and clears the flag.
///
/// None of these waits for the device. The host synchronises only when it
/// asks: DeviceScaleState::Read(), FoundInf(), LastStepSkipped(), and when it
/// creates or overwrites a state (CreateScaleState(), Write(), which wait for
/// the host-to-device copy of their argument).
///
/// The front-ends (amp::DynamicLossScaler, amp::GradScaler) create a state
/// lazily on the gradients' device and from then on keep the state only there
/// (see docs/cuda-backend.md, "Which calls synchronise").
/// Backends without the extension (the CPU backend, user tensors) are used
/// through TensorBackend and ITensor as before; DeviceScalingOf() tells which.

#include <memory>
#include <span>

#include <mlframework/core/ScalePolicy.hpp>
#include <mlframework/core/Device.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// Dynamic-scaling state that lives in device memory: ScaleState, its policy and a found-inf flag.
///
/// Created by DeviceScalingBackend::CreateScaleState(). Every member that returns a value
/// read from the device waits for the work queued before it.
class MLFRAMEWORK_EXPORT DeviceScaleState {
 public:
  virtual ~DeviceScaleState();
  /// Not copyable: it owns device memory.
  DeviceScaleState(const DeviceScaleState&) = delete;
  /// Not copy-assignable.
  DeviceScaleState& operator=(const DeviceScaleState&) = delete;
  /// Device whose memory holds the state.
  virtual Device GetDevice() const noexcept = 0;
  /// The policy UpdateScale() applies.
  virtual const ScalePolicy& Policy() const noexcept = 0;
  /// Copies the state to the host (waits for queued work).
  virtual ScaleState Read() const = 0;
  /// Overwrites the state (for example when a saved scaler is loaded) and clears the flag.
  virtual void Write(const ScaleState& state) = 0;
  /// True when a non-finite value was seen since the last UpdateScale() (waits for queued work).
  virtual bool FoundInf() const = 0;
  /// Sets the found-inf flag without waiting, for example after an overflow found on another backend.
  virtual void MarkFoundInf() = 0;
  /// Clears the found-inf flag without waiting (a front-end that advances the state with an
  /// overflow decision made on the host sets the flag to exactly that decision).
  virtual void ClearFoundInf() = 0;
  /// True when the last UpdateScale() saw an overflow, so that step must be skipped (waits for queued work).
  virtual bool LastStepSkipped() const = 0;

 protected:
  /// Only backends construct states.
  DeviceScaleState() = default;
};

/// A TensorBackend whose multi-tensor kernels can take their factor from, and report
/// overflow into, a DeviceScaleState without a host synchronisation.
///
/// All tensors handed to one call must live on the state's device (ArgumentError otherwise).
class MLFRAMEWORK_EXPORT DeviceScalingBackend : public TensorBackend {
 public:
  ~DeviceScalingBackend() override;
  /// New device-resident state on @p device holding @p initial, updated under @p policy
  /// (the caller validates the policy with ValidateScalePolicy()).
  virtual std::unique_ptr<DeviceScaleState> CreateScaleState(Device device, const ScalePolicy& policy,
                                                             const ScaleState& initial) const = 0;
  /// `x *= state.Scale` for every tensor (scales a loss), without reading the scale on the host.
  virtual void ScaleWithState(std::span<ITensor* const> tensors, DeviceScaleState& state) const = 0;
  /// `x *= InverseScale(state.Scale)` in place; sets the flag when a written value is Inf or NaN.
  virtual void UnscaleWithState(std::span<ITensor* const> tensors, DeviceScaleState& state) const = 0;
  /// `dst[i] = src[i] * InverseScale(state.Scale)` rounded into dst's dtype; sets the flag on Inf or NaN written.
  virtual void CastUnscaledWithState(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                     DeviceScaleState& state) const = 0;
  /// Sets the flag when any element is Inf or NaN (read only).
  virtual void CheckWithState(std::span<const ITensor* const> tensors, DeviceScaleState& state) const = 0;
  /// Writes the found-inf flag as 1.0f or 0.0f into @p out, a one-element FP32 tensor on the
  /// state's device, without waiting: the flag can then be all-reduced (MAX) across ranks with
  /// IProcessGroup::AllReduce on the device. @p out is reused when it is such a tensor of this
  /// backend, and replaced by a new one otherwise (pass the same pointer every step).
  virtual void FlagToTensor(const DeviceScaleState& state, TensorPtr& out) const = 0;
  /// Sets the found-inf flag to `in[0] != 0` without waiting (the reduced flag written back).
  /// ArgumentError unless @p in is a one-element FP32 tensor of this backend on the state's device.
  virtual void FlagFromTensor(DeviceScaleState& state, const ITensor& in) const = 0;
  /// Advances the state by one step on the device with UpdateScaleState(state, policy, flag),
  /// records whether the step overflowed (LastStepSkipped()) and clears the flag.
  virtual void UpdateScale(DeviceScaleState& state) const = 0;

 protected:
  /// Only implementations construct the interface.
  DeviceScalingBackend() = default;
  /// Implementations may be copyable.
  DeviceScalingBackend(const DeviceScalingBackend&) = default;
  /// Implementations may be copy-assignable.
  DeviceScalingBackend& operator=(const DeviceScalingBackend&) = default;
};

/// The inverse of a loss scale as every backend computes it: `float(1.0 / double(scale))`
/// (exact for the power-of-two scales used in practice).
MLFW_HOST_DEVICE inline float InverseScale(float scale) { return static_cast<float>(1.0 / static_cast<double>(scale)); }

/// The device-scaling extension of @p tensor's backend, or null when its backend has none.
MLFRAMEWORK_EXPORT const DeviceScalingBackend* DeviceScalingOf(const ITensor& tensor) noexcept;

}  // namespace mlframework
