#pragma once
/// @file HostScaling.hpp
/// @brief The scaling interface on the host: a state in host memory and the backend's own kernels.
///
/// The CPU backend implements DeviceScalingBackend (core/DeviceScaling.hpp) through
/// HostScalingBackend, and HostScaling() does the same for tensors whose backend implements no
/// scaling (a user's ITensor), so every front end runs one code path on every backend. core's
/// WritePass() and ReadPass() (MultiTensor.hpp) run a pass with a HostScaleState as the plain pass
/// with the state's factor and record its answer into the state, so the backends' kernels never
/// see a host state.

#include <memory>

#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// A scaling state in host memory: a ScaleState, its policy, the found-inf flag and the last
/// step's skip decision. Nothing here waits for anything.
class MLFRAMEWORK_EXPORT HostScaleState final : public DeviceScaleState {
 public:
  /// A state holding @p initial, updated under @p policy.
  HostScaleState(const ScalePolicy& policy, const ScaleState& initial) : policy_(policy), state_(initial) {}
  /// Device::CPU().
  Device GetDevice() const noexcept override { return Device::CPU(); }
  /// The policy UpdateScale() applies.
  const ScalePolicy& Policy() const noexcept override { return policy_; }
  /// A copy of the state.
  ScaleState Read() const override { return state_; }
  /// Overwrites the state and clears the flag.
  void Write(const ScaleState& state) override {
    state_ = state;
    found_inf_ = false;
    amax_ = 0.0f;
  }
  /// The flag.
  bool FoundInf() const override { return found_inf_; }
  /// Sets the flag.
  void MarkFoundInf() override { found_inf_ = true; }
  /// Clears the flag.
  void ClearFoundInf() override { found_inf_ = false; }
  /// Whether the last update saw an overflow.
  bool LastStepSkipped() const override { return last_skipped_; }
  /// An FP32 host tensor holding the flag (and the amax while tracked), reused when @p out already is one.
  void FlagToTensor(TensorPtr& out) const override;
  /// Sets the flag to `in[0] != 0` (and the amax to `in[1]` while tracked); ArgumentError unless
  /// @p in is an FP32 host tensor of the element count FlagToTensor() writes.
  void FlagFromTensor(const ITensor& in) override;
  /// The amax folded in since the last clear.
  float Amax() const override { return amax_; }
  /// Sets the amax to 0.
  void ClearAmax() override { amax_ = 0.0f; }
  /// Folds @p amax into the amax (a maximum).
  void RecordAmax(float amax) noexcept { amax_ = amax > amax_ ? amax : amax_; }
  /// Sets the amax to @p amax (the value agreed across ranks written back).
  void SetAmax(float amax) noexcept { amax_ = amax; }

  /// The current scale (what the host kernels multiply by, or by the inverse of).
  float CurrentScale() const noexcept { return state_.Scale; }
  /// ORs @p found into the flag.
  void Record(bool found) noexcept { found_inf_ = found_inf_ || found; }
  /// Advances the state with the flag, records the skip decision and clears the flag.
  void Update() noexcept {
    last_skipped_ = UpdateScaleState(state_, policy_, found_inf_);
    found_inf_ = false;
  }

 private:
  ScalePolicy policy_;
  ScaleState state_;
  bool found_inf_ = false;
  bool last_skipped_ = false;
  float amax_ = 0.0f;
};

/// The scaling interface on any backend whose tensors the host addresses: its states are
/// HostScaleStates, whose passes core runs with the backend's own plain fused kernels. The CPU
/// backend is one; HostScaling() is the one for tensors whose backend has no scaling of its own.
class MLFRAMEWORK_EXPORT HostScalingBackend : public DeviceScalingBackend {
 public:
  ~HostScalingBackend() override;
  /// A HostScaleState (@p device is not used: the state lives in host memory).
  std::unique_ptr<DeviceScaleState> CreateScaleState(Device device, const ScalePolicy& policy,
                                                     const ScaleState& initial) const override;
  /// UpdateScaleState() on the host state; ArgumentError naming `state` for a state of another kind.
  void UpdateScale(DeviceScaleState& state) const override;

 protected:
  /// Only backends construct the interface.
  HostScalingBackend() = default;
  /// Backends may be copyable.
  HostScalingBackend(const HostScalingBackend&) = default;
  /// Backends may be copy-assignable.
  HostScalingBackend& operator=(const HostScalingBackend&) = default;
};

/// Scaling for tensors whose backend implements none (a user's ITensor, with or without a
/// TensorBackend): host states, whose passes core runs through each tensor's own backend, or
/// through the tensor's ITensor members where it has none.
MLFRAMEWORK_EXPORT const HostScalingBackend& HostScaling() noexcept;

}  // namespace mlframework
