#pragma once
// Private: the single owner of a dynamic scaler's state, and the one code path of every front end.
//
// The state is a DeviceScaleState of the scaling backend of the scaler's tensors
// (core/DeviceScaling.hpp): in host memory for CPU and user tensors, on the device for CUDA
// tensors. It starts in host memory; Place() moves it where the next operation's tensors keep
// theirs (one synchronisation onto or off a device), so exactly one copy is current. One host
// state (HostScaling()'s) serves every host backend.
//
// Reads are cached until the next update (the only call that changes the state), so the
// accessors between two updates cost one synchronisation together on a device; Update(bool)
// advances the cached copy with the same UpdateScaleState(). The "record" is the state's
// found-inf flag: kernels OR into it without waiting; the owner knows when nothing was recorded
// since the last clear and then answers Recorded() without a read.

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/HostScaling.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/ScalePolicy.hpp>

namespace mlframework::detail {

class ScaleStateOwner {
 public:
  ScaleStateOwner(const ScalePolicy& policy, const ScaleState& initial);
  // The copy holds a host state and no record (reads a device state: one synchronisation).
  // The copy tracks the amax when @p other does (from 0).
  ScaleStateOwner(const ScaleStateOwner& other) : ScaleStateOwner(other.policy_, other.Read()) {
    state_->SetAmaxTracking(other.AmaxTracking());
  }
  ScaleStateOwner& operator=(const ScaleStateOwner& other);
  ScaleStateOwner(ScaleStateOwner&&) noexcept = default;
  ScaleStateOwner& operator=(ScaleStateOwner&&) noexcept = default;
  ~ScaleStateOwner() = default;

  const ScalePolicy& Policy() const noexcept { return policy_; }
  // The state while it lives in device memory, else null.
  DeviceScaleState* DeviceState() const noexcept { return OnHost() ? nullptr : state_.get(); }

  // The current state (on a device: copied to the host, waiting for queued work, unless it was
  // read since the last update).
  ScaleState Read() const;
  // Replaces the state and clears the record (on a device: waits for the copy).
  void Write(const ScaleState& state);

  // Puts the state where the scaling backend of @p tensors keeps it, from core's grouping of the
  // list (TensorGroups.hpp's GroupByBackend()). ArgumentError naming
  // `<parameter>[i]` when the list mixes a device backend with other tensors, or two devices.
  // An empty list leaves the state where it is.
  void Place(std::span<const TensorPtr> tensors, const char* parameter);

  // The unscale of every front end, on the placed state: @p in_place x InverseScale(scale) in
  // place, then `dst = src x InverseScale(scale)` rounded into dst, with the scale read where the
  // state lives; "a non-finite value written" goes into the record. Never waits.
  void Unscale(std::span<const TensorPtr> in_place, std::span<const TensorPtr> src, std::span<const TensorPtr> dst);
  // ORs "any element of @p tensors is Inf or NaN" into the record. Never waits.
  void Check(std::span<const TensorPtr> tensors);
  // True when @p buffer can take the unscaled @p like again: same shape, device and scaling home.
  static bool Fits(const ITensor& buffer, const ITensor& like);
  // A new tensor @p loss x scale: where the state lives without a read when the loss lives
  // there, else with the current scale (read once, then cached).
  TensorPtr ScaleLoss(const TensorPtr& loss) const;

  // Runs @p call (recording calls on this owner) with the record saved, cleared and restored
  // around it, and returns what @p call alone recorded (on a device: reads the flag).
  template <typename Call>
  bool OwnResult(Call&& call) {
    const bool before = Recorded();
    ClearRecord();
    call();
    const bool found = Recorded();
    ClearRecord();
    Record(before);
    return found;
  }

  // ORs @p overflow into the record (no wait).
  void Record(bool overflow);
  // The record (on a device: reads the flag unless nothing was recorded since the last clear).
  bool Recorded() const;
  // Clears the record (no wait).
  void ClearRecord();
  // Advances the state with @p overflow exactly (the record is replaced by it, then cleared). No wait.
  void Update(bool overflow);
  // Advances the state with the record and clears it. No wait.
  void UpdateFromRecord();
  // Amax tracking on the state (DeviceScaleState, "Amax"): kept when the state moves to another
  // device (the amax folded in so far is not: a state moves before a step's first pass).
  void SetAmaxTracking(bool on) { state_->SetAmaxTracking(on); }
  bool AmaxTracking() const noexcept { return state_->AmaxTracking(); }
  // The amax since the last clear (on a device: waits for queued work).
  float Amax() const { return state_->Amax(); }
  // Clears the amax (no wait).
  void ClearAmax() {
    if (state_->AmaxTracking()) state_->ClearAmax();
  }
  // The record as a one-element FP32 tensor where the state lives (for an all-reduce there), two
  // elements (the record, the amax) while the amax is tracked.
  void FlagToTensor(TensorPtr& out) const;
  // The record set to `in[0] != 0` (the reduced flag written back). No wait.
  void FlagFromTensor(const ITensor& in);

 private:
  void MoveTo(const DeviceScalingBackend& backend, Device device);
  bool OnHost() const noexcept { return backend_ == &HostScaling(); }
  bool IsOnStateDevice(const ITensor& tensor) const;

  ScalePolicy policy_;
  const DeviceScalingBackend* backend_;  // HostScaling() for a host state
  std::unique_ptr<DeviceScaleState> state_;
  bool dirty_ = false;                      // the flag may be set (false: known clear, no read needed)
  mutable std::optional<ScaleState> view_;  // the state as last read; reset by updates
};

}  // namespace mlframework::detail
