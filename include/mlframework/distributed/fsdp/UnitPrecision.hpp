#pragma once
/// @file UnitPrecision.hpp
/// @brief A sharding unit's own precision policy (PyTorch FSDP2's per-`fully_shard` policy).

#include <optional>

#include <mlframework/core/DataType.hpp>
#include <mlframework/distributed/fsdp/FSDPConfig.hpp>
#include <mlframework/export.hpp>

namespace mlframework::distributed::fsdp {

/// The dtypes one unit gathers and reduces in, when they differ from the FSDP's: for example
/// norm and embedding units kept in FP32 while the rest gather in BF16, as FSDP2 users pass a
/// `MixedPrecisionPolicy` to each `fully_shard` and Megatron keeps layer norms in FP32.
/// An unset field follows the FSDP: FSDPConfig's value, and for ParamDType also later
/// FSDP::SetParamDType() calls (FSDPAmpIntegration's forward dtype). A set ParamDType stays.
/// The gradient shard stays FP32 either way, so gradient clipping and the overflow check span all
/// units alike.
struct UnitPrecision {
  /// Dtype this unit is gathered in and handed to the forward pass; unset: the FSDP's.
  std::optional<DataType> ParamDType{};
  /// Dtype this unit's gradients are reduced in; unset: the FSDP's.
  std::optional<DataType> ReduceDType{};
  /// What this unit's gradients travel as; unset: the FSDP's FSDPConfig::Wire.
  std::optional<GradientWire> Wire{};
  /// Whether this unit sums micro-batches without sync in its FP32 gradient shard (true) or in an
  /// unsharded accumulator (false); unset: the FSDP's FSDPConfig::ShardedAccumulation.
  std::optional<bool> ShardedAccumulation{};
  /// Dtype of this unit's master shard (Float32 or BFloat16); unset: FSDPConfig::MasterDType.
  std::optional<DataType> MasterDType{};

  /// ArgumentError naming the first set field that is not a DataType (a GradientWire for Wire),
  /// and its value, a ReduceDType that is an FP8 dtype (FSDP gathers in FP8, as
  /// FSDPConfig::ParamDType says, but reduces in Float32, Float16 or BFloat16 only), or a
  /// MasterDType other than Float32 and BFloat16.
  MLFRAMEWORK_EXPORT void Validate() const;
};

}  // namespace mlframework::distributed::fsdp
