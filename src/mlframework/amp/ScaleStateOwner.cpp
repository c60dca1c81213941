#include "mlframework/amp/ScaleStateOwner.hpp"

#include <string>

#include <mlframework/core/Error.hpp>

namespace mlframework::amp::detail {

ScaleStateOwner& ScaleStateOwner::operator=(const ScaleStateOwner& other) {
  if (this != &other) {
    ScaleStateOwner copy(other);
    *this = std::move(copy);
  }
  return *this;
}

ScaleState ScaleStateOwner::Read() const {
  if (!device_) {
    return host_;
  }
  if (!device_view_) {
    device_view_ = device_->Read();
  }
  return *device_view_;
}

void ScaleStateOwner::Write(const ScaleState& state) {
  if (device_) {
    device_view_.reset();
    device_->Write(state);  // also clears the flag
    device_view_ = state;
    device_dirty_ = false;
  } else {
    host_ = state;
  }
  host_record_ = false;
}

bool ScaleStateOwner::IsOnStateDevice(const ITensor& tensor) const {
  return device_ && DeviceScalingOf(tensor) == backend_ && tensor.GetDevice() == device_->GetDevice();
}

const DeviceScalingBackend* ScaleStateOwner::Route(std::span<const TensorPtr> tensors, const char* parameter) {
  if (tensors.empty()) {
    return backend_;  // nothing to say where the next step runs: the state stays where it is
  }
  const DeviceScalingBackend* backend = nullptr;
  Device device;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const DeviceScalingBackend* own = DeviceScalingOf(*tensors[i]);
    const Device own_device = tensors[i]->GetDevice();
    if (i == 0) {
      backend = own;
      device = own_device;
      continue;
    }
    if (own != backend || (own != nullptr && own_device != device)) {
      throw ArgumentError(std::string(parameter) + "[" + std::to_string(i) + "]",
                          "is on " + own_device.ToString() + " but entry 0 is on " + device.ToString() +
                              ": a dynamic scaler keeps its state on one device, so one call takes "
                              "tensors of one device-scaling backend and device, or host tensors only");
    }
  }
  if (backend == nullptr) {
    if (device_) {
      MoveToHost();
    }
    return nullptr;
  }
  if (!device_ || backend_ != backend || device_->GetDevice() != device) {
    MoveToDevice(*backend, device);
  }
  return backend;
}

void ScaleStateOwner::MoveToHost() {
  const ScaleState state = Read();
  const bool record = Recorded();
  host_ = state;
  host_record_ = record;
  device_.reset();
  device_view_.reset();
  backend_ = nullptr;
  device_dirty_ = false;
}

void ScaleStateOwner::MoveToDevice(const DeviceScalingBackend& backend, Device device) {
  const ScaleState state = Read();
  const bool record = Recorded();
  std::unique_ptr<DeviceScaleState> next = backend.CreateScaleState(device, policy_, state);
  if (record) {
    next->MarkFoundInf();
  }
  device_ = std::move(next);
  device_view_ = state;
  backend_ = &backend;
  device_dirty_ = record;
  host_record_ = false;
}

void ScaleStateOwner::Record(bool overflow) {
  if (!overflow) {
    return;
  }
  if (device_) {
    device_->MarkFoundInf();
    device_dirty_ = true;
  } else {
    host_record_ = true;
  }
}

bool ScaleStateOwner::Recorded() const {
  if (device_) {
    return device_dirty_ && device_->FoundInf();
  }
  return host_record_;
}

void ScaleStateOwner::ClearRecord() {
  if (device_ && device_dirty_) {
    device_->ClearFoundInf();
  }
  device_dirty_ = false;
  host_record_ = false;
}

void ScaleStateOwner::Update(bool overflow) {
  if (device_) {
    ClearRecord();
    Record(overflow);
    std::optional<ScaleState> view = device_view_;
    device_view_.reset();
    backend_->UpdateScale(*device_);  // clears the flag
    device_dirty_ = false;
    if (view) {
      // The host knows the decision and the state before it: the same function gives the same
      // bits the device computes, so the cached view stays current without a read.
      UpdateScaleState(*view, policy_, overflow);
      device_view_ = view;
    }
    return;
  }
  UpdateScaleState(host_, policy_, overflow);
  host_record_ = false;
}

void ScaleStateOwner::UpdateFromRecord() {
  if (device_) {
    device_view_.reset();
    backend_->UpdateScale(*device_);  // reads and clears the flag on the device
    device_dirty_ = false;
    return;
  }
  UpdateScaleState(host_, policy_, host_record_);
  host_record_ = false;
}

TensorPtr ScaleStateOwner::ScaleLoss(const TensorPtr& loss) const {
  if (IsOnStateDevice(*loss)) {
    TensorPtr scaled = loss->Clone();
    ITensor* const raw[] = {scaled.get()};
    backend_->ScaleWithState(raw, *device_);  // the scale is read on the device
    return scaled;
  }
  return loss->Multiply(Read().Scale);
}

}  // namespace mlframework::amp::detail
