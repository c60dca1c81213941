// Spec 002: FSDPMixedPrecisionConfig.
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionConfig.hpp>

#include <string>

#include <mlframework/core/Error.hpp>

namespace mlframework::distributed::fsdp {

void FSDPMixedPrecisionConfig::Validate() const {
  if (ForwardDType != TensorDataType::Float16 && ForwardDType != TensorDataType::BFloat16) {
    throw ArgumentError("ForwardDType", "must be Float16 or BFloat16, got " +
                                            (IsValid(ForwardDType) ? std::string(ToString(ForwardDType))
                                                                   : std::to_string(static_cast<int>(ForwardDType))));
  }
  if (BackwardDType != TensorDataType::Float32) {
    throw ArgumentError("BackwardDType",
                        "must be Float32 for stability, got " +
                            (IsValid(BackwardDType) ? std::string(ToString(BackwardDType))
                                                    : std::to_string(static_cast<int>(BackwardDType))));
  }
  amp::ScalePolicyFieldNames names;
  names.InitialScale = "InitialLossScale";
  names.GrowthFactor = "LossScaleGrowthFactor";
  names.BackoffFactor = "LossScaleBackoffFactor";
  names.GrowthInterval = "LossScaleSteps";
  names.MinScale = "MinLossScale";
  names.MaxScale = "MaxLossScale";
  amp::ValidateScalePolicy(ToScalePolicy(), names);
}

amp::ScalePolicy FSDPMixedPrecisionConfig::ToScalePolicy() const {
  return amp::ScalePolicy{.InitialScale = InitialLossScale,
                          .GrowthFactor = LossScaleGrowthFactor,
                          .BackoffFactor = LossScaleBackoffFactor,
                          .GrowthInterval = LossScaleSteps,
                          .MinScale = MinLossScale,
                          .MaxScale = MaxLossScale,
                          .Hysteresis = 1};
}

}  // namespace mlframework::distributed::fsdp
