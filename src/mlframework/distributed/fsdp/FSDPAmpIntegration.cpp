// Spec 002: FSDPAmpIntegration.
#include <mlframework/distributed/fsdp/FSDPAmpIntegration.hpp>

#include <utility>

#include <mlframework/core/Error.hpp>

namespace mlframework::distributed::fsdp {

FSDPAmpIntegration::FSDPAmpIntegration(FSDP& fsdp, std::optional<FSDPMixedPrecisionConfig> mpConfig)
    : fsdp_(fsdp), mp_manager_(mpConfig.value_or(FSDPMixedPrecisionConfig{}), fsdp) {
  // Cast before the all-gather rather than after it: 16-bit traffic.
  if (mp_manager_.Config().Enabled) fsdp_.SetParamDType(mp_manager_.Config().ForwardDType);
}

void FSDPAmpIntegration::ApplyMixedPrecision(FSDPShardingUnit& shardingUnit) {
  if (!shardingUnit.IsGathered() || !shardingUnit.GatheredParameter()) {
    throw InvalidOperationError("Parameter must be gathered first (unit '" + shardingUnit.Name() + "')");
  }
  TensorPtr converted = mp_manager_.ConvertToMixedPrecision(shardingUnit.GatheredParameter());
  if (converted != shardingUnit.GatheredParameter()) shardingUnit.SetGatheredParameter(std::move(converted));
}

void FSDPAmpIntegration::ApplyGradientFP32(FSDPShardingUnit& shardingUnit) {
  if (!shardingUnit.LocalGradient()) {
    throw InvalidOperationError("Gradients not computed yet (unit '" + shardingUnit.Name() + "')");
  }
  TensorPtr converted = mp_manager_.ConvertGradientToFP32(shardingUnit.LocalGradient());
  if (converted != shardingUnit.LocalGradient()) shardingUnit.SetLocalGradient(std::move(converted));
}

TensorPtr FSDPAmpIntegration::ScaleLoss(const TensorPtr& loss) { return mp_manager_.ScaleLoss(loss); }

bool FSDPAmpIntegration::CheckOverflow(const GradientMap& gradients) { return mp_manager_.CheckOverflow(gradients); }

FSDPMixedPrecisionManager& FSDPAmpIntegration::Manager() noexcept { return mp_manager_; }

}  // namespace mlframework::distributed::fsdp
