#include <mlframework/core/ScalePolicy.hpp>

#include <cmath>

#include <mlframework/core/Error.hpp>

#include "mlframework/core/Validation.hpp"

namespace mlframework {

using detail::Show;

void ValidateScalePolicy(const ScalePolicy& policy, const ScalePolicyFieldNames& names) {
  detail::RequirePositive(policy.InitialScale, names.InitialScale);
  detail::RequirePositive(policy.MinScale, names.MinScale);
  detail::RequirePositive(policy.MaxScale, names.MaxScale);
  if (!std::isfinite(policy.GrowthFactor) || policy.GrowthFactor <= 1.0f) {
    throw ArgumentError(names.GrowthFactor, "must be finite and > 1, got " + Show(policy.GrowthFactor));
  }
  if (!(policy.BackoffFactor > 0.0f && policy.BackoffFactor < 1.0f)) {
    throw ArgumentError(names.BackoffFactor, "must be strictly between 0 and 1, got " + Show(policy.BackoffFactor));
  }
  if (policy.GrowthInterval < 1) {
    throw ArgumentError(names.GrowthInterval, "must be >= 1, got " + Show(static_cast<double>(policy.GrowthInterval)));
  }
  if (policy.Hysteresis < 1) {
    throw ArgumentError(names.Hysteresis, "must be >= 1, got " + Show(static_cast<double>(policy.Hysteresis)));
  }
  if (policy.MinScale > policy.MaxScale) {
    throw ArgumentError(names.MinScale, "(" + Show(policy.MinScale) + ") must not exceed " + names.MaxScale + " (" +
                                            Show(policy.MaxScale) + ")");
  }
  if (policy.InitialScale < policy.MinScale || policy.InitialScale > policy.MaxScale) {
    throw ArgumentError(names.InitialScale, "must be within [" + Show(policy.MinScale) + ", " + Show(policy.MaxScale) +
                                                "], got " + Show(policy.InitialScale));
  }
}

}  // namespace mlframework
