#pragma once
// Private: the single owner of a dynamic scaler's state, on the host or on a device.
//
// A dynamic scaler starts host-owned: amp::ScaleState in host memory, advanced
// with UpdateScaleState(). The first unscale, check or update on tensors whose
// backend is a DeviceScalingBackend moves the state to that device
// (CreateScaleState from the host copy); from then on the device copy is the
// only truth and the host copy is not read or written, until an operation on
// host tensors (or on another device) moves it back (one synchronisation), or
// Write() replaces it. Exactly one copy is current at any time.
//
// Reads of a device-owned state are cached until the next device update (the
// only call that changes it), so Scale(), stats and counters read between two
// updates cost one synchronisation together. An update with a host decision
// (Update(bool)) advances the cached copy with the same UpdateScaleState(), so
// it stays current; an update from the device flag drops it. Nothing else may change the
// device state behind the owner's back (DeviceState() is for reading the flag).
//
// The "record" is the found-inf result of the current step: a host bool when
// host-owned, the state's device flag when device-owned. Recording calls never
// wait for the device; Recorded(), Read() and migrations do.

#include <memory>
#include <optional>
#include <span>

#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/ITensor.hpp>

namespace mlframework::amp::detail {

class ScaleStateOwner {
 public:
  ScaleStateOwner(const ScalePolicy& policy, const ScaleState& initial) : policy_(policy), host_(initial) {}
  // The copy is host-owned and holds no record (reads the device state: one synchronisation).
  ScaleStateOwner(const ScaleStateOwner& other) : policy_(other.policy_), host_(other.Read()) {}
  ScaleStateOwner& operator=(const ScaleStateOwner& other);
  ScaleStateOwner(ScaleStateOwner&&) noexcept = default;
  ScaleStateOwner& operator=(ScaleStateOwner&&) noexcept = default;
  ~ScaleStateOwner() = default;

  const ScalePolicy& Policy() const noexcept { return policy_; }
  // The device state while device-owned, else null.
  DeviceScaleState* DeviceState() const noexcept { return device_.get(); }
  const DeviceScalingBackend* Backend() const noexcept { return backend_; }

  // The current state (device-owned: copies it to the host, waiting for queued work, unless
  // it was read since the last update).
  ScaleState Read() const;
  // Replaces the state and clears the record (device-owned: written there, which waits for the copy).
  void Write(const ScaleState& state);

  // Where an operation on @p tensors runs: their DeviceScalingBackend (the state is moved to
  // their device first when it is not there yet), or null for the host path (a device-owned
  // state is moved back first). ArgumentError naming `<parameter>[i]` when the list mixes a
  // device-scaling backend with other tensors, or two devices. An empty list leaves the state
  // where it is (the current backend, or null when host-owned).
  const DeviceScalingBackend* Route(std::span<const TensorPtr> tensors, const char* parameter);
  // True when @p tensor lives where the device state does (same backend and device).
  bool IsOnStateDevice(const ITensor& tensor) const;
  // A new tensor @p loss x scale: on the state's device without a read when the loss lives
  // there, else with the current scale (device-owned: read back once, then cached).
  TensorPtr ScaleLoss(const TensorPtr& loss) const;

  // Host path: ORs @p overflow into the record. Device path: sets the flag when true (no wait).
  void Record(bool overflow);
  // The record (device-owned: reads the flag, waiting for queued work; skipped when nothing
  // was recorded since the last clear, which the host knows).
  bool Recorded() const;
  // Clears the record (no wait).
  void ClearRecord();
  // Marks that a device operation may have set the flag (called after each recording kernel).
  void NoteDeviceRecord() noexcept { device_dirty_ = true; }

  // Advances the state with @p overflow exactly (the record is replaced by it, then cleared). No wait.
  void Update(bool overflow);
  // Advances the state with the record and clears it. No wait.
  void UpdateFromRecord();

 private:
  void MoveToHost();
  void MoveToDevice(const DeviceScalingBackend& backend, Device device);

  ScalePolicy policy_;
  ScaleState host_;
  bool host_record_ = false;
  const DeviceScalingBackend* backend_ = nullptr;
  std::unique_ptr<DeviceScaleState> device_;
  bool device_dirty_ = false;                      // the device flag may be set (false: known clear, no read needed)
  mutable std::optional<ScaleState> device_view_;  // the device state as last read; reset by updates
};

}  // namespace mlframework::amp::detail
