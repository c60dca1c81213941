// Spec 002: FSDPMixedPrecisionConfig.
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionConfig.hpp>

#include <string>

#include <mlframework/core/Error.hpp>

namespace mlframework::distributed::fsdp {

void FSDPMixedPrecisionConfig::Validate() const {
  // The dtype's name, or its number when it is not a DataType.
  const auto name = [](TensorDataType dtype) {
    return IsValid(dtype) ? std::string(ToString(dtype)) : std::to_string(static_cast<int>(dtype));
  };
  if (ForwardDType != TensorDataType::Float16 && ForwardDType != TensorDataType::BFloat16) {
    throw ArgumentError("ForwardDType", "must be Float16 or BFloat16, got " + name(ForwardDType));
  }
  if (BackwardDType != TensorDataType::Float32) {
    throw ArgumentError("BackwardDType", "must be Float32 for stability, got " + name(BackwardDType));
  }
  amp::ValidateScalePolicy(ToScalePolicy(), amp::ScalePolicyFieldNames{.InitialScale = "InitialLossScale",
                                                                       .GrowthFactor = "LossScaleGrowthFactor",
                                                                       .BackoffFactor = "LossScaleBackoffFactor",
                                                                       .GrowthInterval = "LossScaleSteps",
                                                                       .MinScale = "MinLossScale",
                                                                       .MaxScale = "MaxLossScale"});
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
