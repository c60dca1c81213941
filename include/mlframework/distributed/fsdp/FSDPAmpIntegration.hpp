#pragma once
/// @file FSDPAmpIntegration.hpp
/// @brief AMP applied to FSDP sharding units (spec 002, FSDPAmpIntegration).

#include <optional>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionConfig.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>
#include <mlframework/distributed/fsdp/FSDPShardingUnit.hpp>
#include <mlframework/export.hpp>

namespace mlframework::distributed::fsdp {

/// Integration points of automatic mixed precision with FSDP.
///
/// When mixed precision is enabled the constructor also sets the FSDP parameter dtype to
/// ForwardDType, so units are cast before the all-gather and travel in 16 bits; then
/// ApplyMixedPrecision() finds them already in the forward dtype and changes nothing.
class MLFRAMEWORK_EXPORT FSDPAmpIntegration {
 public:
  /// AMP for @p fsdp (which must outlive this object) with @p mpConfig, or the spec defaults.
  explicit FSDPAmpIntegration(FSDP& fsdp, std::optional<FSDPMixedPrecisionConfig> mpConfig = std::nullopt);
  ~FSDPAmpIntegration() = default;
  /// Not copyable: owns the manager.
  FSDPAmpIntegration(const FSDPAmpIntegration&) = delete;
  /// Not assignable.
  FSDPAmpIntegration& operator=(const FSDPAmpIntegration&) = delete;

  /// Replaces the unit's gathered parameter with its forward-dtype version (views rebuilt).
  /// InvalidOperationError "Parameter must be gathered first" when it is not gathered.
  void ApplyMixedPrecision(FSDPShardingUnit& shardingUnit);
  /// Replaces the unit's local gradient with its FP32 version.
  /// InvalidOperationError "Gradients not computed yet" when it has none.
  void ApplyGradientFP32(FSDPShardingUnit& shardingUnit);
  /// Manager().ScaleLoss(loss).
  TensorPtr ScaleLoss(const TensorPtr& loss);
  /// Manager().CheckOverflow(gradients) (collective).
  bool CheckOverflow(const GradientMap& gradients);
  /// The mixed-precision manager.
  FSDPMixedPrecisionManager& Manager() noexcept;

 private:
  FSDP& fsdp_;
  FSDPMixedPrecisionManager mp_manager_;
};

}  // namespace mlframework::distributed::fsdp
