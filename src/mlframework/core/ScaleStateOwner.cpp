#include "mlframework/core/ScaleStateOwner.hpp"

#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>

#include "mlframework/core/TensorGroups.hpp"

namespace mlframework::detail {

ScaleStateOwner::ScaleStateOwner(const ScalePolicy& policy, const ScaleState& initial)
    : policy_(policy), backend_(&HostScaling()), state_(backend_->CreateScaleState(Device::CPU(), policy, initial)) {}

ScaleStateOwner& ScaleStateOwner::operator=(const ScaleStateOwner& other) {
  if (this != &other) *this = ScaleStateOwner(other);
  return *this;
}

ScaleState ScaleStateOwner::Read() const {
  if (!view_) {
    view_ = state_->Read();
  }
  return *view_;
}

void ScaleStateOwner::Write(const ScaleState& state) {
  view_.reset();
  state_->Write(state);  // also clears the flag
  view_ = state;
  dirty_ = false;
}

bool ScaleStateOwner::IsOnStateDevice(const ITensor& tensor) const {
  const DeviceScalingBackend* device = DeviceScalingOf(tensor);
  return OnHost() ? device == nullptr : device == backend_ && tensor.GetDevice() == state_->GetDevice();
}

// The state follows core's grouping of the list: one group of a device-scaling backend (one
// backend, one device), or host groups only, which one host state serves.
void ScaleStateOwner::Place(std::span<const TensorPtr> tensors, const char* parameter) {
  if (tensors.empty()) {
    return;  // nothing to say where the next step runs: the state stays where it is
  }
  const std::vector<BackendGroup> groups = GroupByBackend(tensors);
  const Device device = groups.front().device;
  const DeviceScalingBackend* on_device = DeviceScalingOf(*tensors[0]);
  for (std::size_t g = 1; g < groups.size(); ++g) {
    const std::size_t i = groups[g].indices.front();
    if (on_device == nullptr && DeviceScalingOf(*tensors[i]) == nullptr) {
      continue;  // host tensors of several backends
    }
    throw ArgumentError(std::string(parameter) + "[" + std::to_string(i) + "]",
                        "is on " + tensors[i]->GetDevice().ToString() + " but entry 0 is on " +
                            tensors[0]->GetDevice().ToString() +
                            ": a dynamic scaler keeps its state on one device, so one call takes "
                            "tensors of one device-scaling backend and device, or host tensors only");
  }
  const DeviceScalingBackend& backend = on_device != nullptr ? *on_device : HostScaling();
  const Device home = on_device != nullptr ? device : Device::CPU();
  if (&backend != backend_ || state_->GetDevice() != home) {
    MoveTo(backend, home);
  }
}

void ScaleStateOwner::MoveTo(const DeviceScalingBackend& backend, Device device) {
  const ScaleState state = Read();
  const bool record = Recorded();
  std::unique_ptr<DeviceScaleState> next = backend.CreateScaleState(device, policy_, state);
  next->SetAmaxTracking(state_->AmaxTracking());
  if (record) {
    next->MarkFoundInf();
  }
  state_ = std::move(next);
  view_ = state;
  backend_ = &backend;
  dirty_ = record;
}

void ScaleStateOwner::Unscale(std::span<const TensorPtr> in_place, std::span<const TensorPtr> src,
                              std::span<const TensorPtr> dst) {
  if (!in_place.empty()) WritePass(in_place, {}, {.Op = WriteOp::Scale, .State = state_.get()});
  if (!src.empty()) WritePass(src, dst, {.Op = WriteOp::Cast, .State = state_.get()});
  dirty_ = dirty_ || !in_place.empty() || !src.empty();
}

void ScaleStateOwner::Check(std::span<const TensorPtr> tensors) {
  if (!tensors.empty()) ReadPass(tensors, {.State = state_.get()});
  dirty_ = dirty_ || !tensors.empty();
}

bool ScaleStateOwner::Fits(const ITensor& buffer, const ITensor& like) {
  // Host buffers serve host tensors of any backend; a device buffer only its own backend's.
  return buffer.GetShape() == like.GetShape() && buffer.GetDevice() == like.GetDevice() &&
         (buffer.Backend() == like.Backend() || DeviceScalingOf(buffer) == DeviceScalingOf(like));
}

TensorPtr ScaleStateOwner::ScaleLoss(const TensorPtr& loss) const {
  if (OnHost() || !IsOnStateDevice(*loss)) {
    return loss->Multiply(Read().Scale);  // a host state's scale is read without a wait
  }
  // The scale is read where the state lives.
  const TensorPtr scaled[] = {loss->Clone()};
  WritePass(scaled, {}, {.Op = WriteOp::Scale, .State = state_.get(), .FactorOfState = StateFactor::Scale});
  return scaled[0];
}

void ScaleStateOwner::Record(bool overflow) {
  if (overflow) {
    state_->MarkFoundInf();
    dirty_ = true;
  }
}

bool ScaleStateOwner::Recorded() const { return dirty_ && state_->FoundInf(); }

void ScaleStateOwner::ClearRecord() {
  if (dirty_) {
    state_->ClearFoundInf();
  }
  dirty_ = false;
}

void ScaleStateOwner::Update(bool overflow) {
  ClearRecord();
  Record(overflow);
  std::optional<ScaleState> view = view_;
  view_.reset();
  backend_->UpdateScale(*state_);  // clears the flag
  dirty_ = false;
  if (view) {
    // The host knows the decision and the state before it: the same function gives the same
    // bits the backend computes, so the cached copy stays current without a read.
    UpdateScaleState(*view, policy_, overflow);
    view_ = view;
  }
}

void ScaleStateOwner::UpdateFromRecord() {
  view_.reset();
  backend_->UpdateScale(*state_);  // reads and clears the flag where the state lives
  dirty_ = false;
}

void ScaleStateOwner::FlagToTensor(TensorPtr& out) const { state_->FlagToTensor(out); }

void ScaleStateOwner::FlagFromTensor(const ITensor& in) {
  state_->FlagFromTensor(in);
  dirty_ = true;
}

}  // namespace mlframework::detail
