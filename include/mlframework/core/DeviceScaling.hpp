#pragma once
/// @file DeviceScaling.hpp
/// @brief The scaling-backend interface: dynamic loss scaling whose state lives with the tensors.
///
/// A backend that keeps scaling state with its tensors implements DeviceScalingBackend (creating
/// a state and advancing it), and its write and read passes (TensorBackend::Write and Read) take
/// the state in their options, so the front ends (amp::DynamicLossScaler,
/// optimizers::mixed_precision::DynamicLossScaler, distributed::fsdp::FSDPMixedPrecisionManager,
/// GradientConversionLayer) have one code path:
///
/// 1. a write pass with `WritePassOptions::State` and StateFactor::Scale multiplies the loss by
///    the scale the state holds;
/// 2. a write pass (WriteOp::Scale in place, WriteOp::Cast into FP32) with the state and
///    StateFactor::InverseScale multiplies gradients by the inverse scale the state holds and ORs
///    "any non-finite value written" into the state's flag (a read pass with
///    `ReadPassOptions::State` only checks);
/// 3. UpdateScale() runs UpdateScaleState() (core/ScalePolicy.hpp), records whether the step
///    must be skipped, and clears the flag.
///
/// core's WritePass() and ReadPass() (MultiTensor.hpp) run these passes on any list. On a GPU
/// (the CUDA backend) the state is in device memory, so none of these waits for the device:
/// reading the found-inf flag back after every unscale would cost a host synchronisation per
/// step. The host synchronises only when it asks: DeviceScaleState::Read(), FoundInf(),
/// LastStepSkipped(), and when it creates or overwrites a state (CreateScaleState(), Write(),
/// which wait for the host-to-device copy of their argument); docs/cuda-backend.md, "Which calls
/// synchronise", lists the front ends' calls.
///
/// On the host (the CPU backend, and HostScaling() for tensors whose backend has no scaling of
/// its own; core/HostScaling.hpp) the state is a HostScaleState, a ScaleState plus a flag in host
/// memory: core's passes read its scale and record into it around the backends' plain fused
/// passes, so the same calls cost what a plain unscale and check cost. ScalingOf() names the
/// scaling backend of a tensor.

#include <memory>
#include <span>
#include <vector>

#include <mlframework/core/Device.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/ScalePolicy.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// Dynamic-scaling state kept where a backend's kernels read it: ScaleState, its policy and a found-inf flag.
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
  /// Device whose memory holds the state (Device::CPU() for a HostScaleState).
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
  /// Writes the found-inf flag as 1.0f or 0.0f into @p out, a one-element FP32 tensor in the
  /// state's memory, without waiting: the flag can then be all-reduced (MAX) across ranks with
  /// IProcessGroup::AllReduce where it lives. While the state tracks the amax, @p out has two
  /// elements, the flag and the amax, so the same MAX all-reduce agrees both. @p out is reused
  /// when it is such a tensor already, and replaced by a new one otherwise (pass the same pointer
  /// every step).
  virtual void FlagToTensor(TensorPtr& out) const = 0;
  /// Sets the found-inf flag to `in[0] != 0` without waiting (the reduced flag written back), and
  /// the amax to `in[1]` when the state tracks it. ArgumentError naming `in` unless @p in is an
  /// FP32 tensor of the kind FlagToTensor() writes (same memory, same element count).
  virtual void FlagFromTensor(const ITensor& in) = 0;

  /// @name Amax (headroom telemetry, off by default)
  /// While on, the unscale passes with the state (WritePassOptions::State with
  /// StateFactor::InverseScale) also fold the largest finite absolute value they write
  /// (NonFiniteAndAmax in TensorBackend.hpp) into the state's amax, in the same pass as the
  /// overflow check: max|g| / scale over the finite gradients, what the optimizer receives. A
  /// read pass with the state does not (the gradients it reads may still be scaled). Inf and NaN are left out, so an
  /// overflowing step still reports the amax of its finite values. UpdateScale() does not touch it; ClearAmax(),
  /// Write() and SetAmaxTracking() set it to 0. While off, the kernels are the plain ones.
  ///@{
  /// Turns amax tracking on or off and clears the amax (no wait).
  void SetAmaxTracking(bool on) {
    amax_tracking_ = on;
    ClearAmax();
  }
  /// Whether the kernels fold the amax in.
  bool AmaxTracking() const noexcept { return amax_tracking_; }
  /// The amax folded in since it was last cleared; 0 when nothing finite was seen or tracking is
  /// off (waits for queued work).
  virtual float Amax() const = 0;
  /// Sets the amax to 0 without waiting.
  virtual void ClearAmax() = 0;
  ///@}

 protected:
  /// Only backends construct states.
  DeviceScaleState() = default;

 private:
  bool amax_tracking_ = false;
};

/// A TensorBackend that keeps dynamic-scaling state with its tensors: it creates the states its
/// write and read passes take (WritePassOptions::State, ReadPassOptions::State) and advances them.
///
/// All tensors of a pass with a state must live on the state's device (ArgumentError otherwise).
class MLFRAMEWORK_EXPORT DeviceScalingBackend : public TensorBackend {
 public:
  ~DeviceScalingBackend() override;

  /// New device-resident state on @p device holding @p initial, updated under @p policy
  /// (the caller validates the policy with ValidateScalePolicy()).
  virtual std::unique_ptr<DeviceScaleState> CreateScaleState(Device device, const ScalePolicy& policy,
                                                             const ScaleState& initial) const = 0;
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

/// The scaling backend of @p tensor's backend when it keeps its states in device memory (CUDA),
/// else null (the CPU backend and every other HostScalingBackend, user tensors): null means the
/// tensor's passes take host states.
MLFRAMEWORK_EXPORT const DeviceScalingBackend* DeviceScalingOf(const ITensor& tensor) noexcept;

/// The scaling backend of @p tensor: its backend when that implements the interface (CPU, CUDA),
/// else HostScaling() (core/HostScaling.hpp).
MLFRAMEWORK_EXPORT const DeviceScalingBackend& ScalingOf(const ITensor& tensor) noexcept;

/// New FP32 tensors shaped like @p like for an unscale to overwrite: for host tensors one
/// contiguous buffer per device (ZerosContiguousLike(), so the cast into them streams like one
/// flat tensor however many small gradients there are); for tensors whose backend keeps device
/// states (DeviceScalingOf()), each allocated by that backend (TensorBackend::Allocate) on its
/// device. A list holds the tensors of one device backend, or host tensors only. Empty for an
/// empty list.
MLFRAMEWORK_EXPORT std::vector<TensorPtr> Float32OutputsLike(std::span<const TensorPtr> like);

}  // namespace mlframework
