#include "CallbackScaler.hpp"

#include <cmath>
#include <string>

#include "Call.hpp"

namespace mlframework::c_api {

namespace {

const mlfw_scale_policy& Checked(const mlfw_scale_policy& policy) {
  if (policy.scale == nullptr) {
    throw ArgumentNullError("policy->scale");
  }
  if (policy.update == nullptr) {
    throw ArgumentNullError("policy->update");
  }
  return policy;
}

}  // namespace

CallbackScaler::CallbackScaler(const mlfw_scale_policy& policy, void* user)
    : policy_(Checked(policy)), user_(user), scale_(ReadScale()), tensors_(scale_) {}

float CallbackScaler::ReadScale() const {
  float scale = 0.0f;
  if (const int result = policy_.scale(user_, &scale); result != 0) {
    throw CallbackError("scale", result);
  }
  if (!std::isfinite(scale) || scale <= 0.0f) {
    throw ArgumentError("scale",
                        "the policy's scale callback gave " + std::to_string(scale) + ", which is not finite and > 0");
  }
  return scale;
}

void CallbackScaler::Apply(float scale) {
  if (scale == scale_) {
    return;
  }
  amp::StaticLossScaler rebuilt(scale, tensors_.IsEnabled());
  rebuilt.SetAmaxTracking(amax_tracking_);
  tensors_ = rebuilt;
  scale_ = scale;
}

bool CallbackScaler::SetAmaxTracking(bool on) {
  amax_tracking_ = on;
  return tensors_.SetAmaxTracking(on);
}

void CallbackScaler::UpdateScale(bool overflow) {
  if (const int result = policy_.update(user_, overflow ? 1 : 0); result != 0) {
    throw CallbackError("update", result);
  }
  Apply(ReadScale());
}

void CallbackScaler::UpdateScaleFromRecord() {
  UpdateScale(tensors_.RecordedOverflow());
  tensors_.ClearRecordedOverflow();
}

void CallbackScaler::Reset() {
  if (policy_.reset != nullptr) {
    if (const int result = policy_.reset(user_); result != 0) {
      throw CallbackError("reset", result);
    }
  }
  Apply(ReadScale());
}

}  // namespace mlframework::c_api
