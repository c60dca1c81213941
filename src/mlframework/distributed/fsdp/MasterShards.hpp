#pragma once
// Private: master shards in BF16 (FSDPConfig::MasterDType) and the optimizers that update them.

#include <string>

#include <mlframework/amp/IOptimizerState.hpp>
#include <mlframework/core/DataType.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/OptimizerStep.hpp>
#include <mlframework/distributed/fsdp/FSDPShardingUnit.hpp>

namespace mlframework::distributed::fsdp::detail {

// ArgumentError naming @p parameter unless @p dtype is Float32 or BFloat16.
void ValidateMasterDType(DataType dtype, const std::string& parameter);

// How @p unit's masters are kept with @p optimizer (null: none): Float32 for an FP32 shard; for a
// BF16 shard the optimizer's format, BFloat16StochasticRounding without an optimizer (the shard
// alone, no remainder).
MasterFormat ShardMasterFormat(const FSDPShardingUnit& unit, const amp::IOptimizerState* optimizer);

// ArgumentError naming @p parameter when @p optimizer (null: no check) keeps its masters in a
// format that does not fit @p unit's shard dtype: BF16 masters over an FP32 shard, or FP32
// masters (copies the shard never sees) over a BF16 one. The message says what to change.
void RequireMatchingMasters(const FSDPShardingUnit& unit, const amp::IOptimizerState* optimizer,
                            const std::string& parameter);

// ArgumentError naming @p parameter unless @p gradients (unit name to gradient shard) match
// @p optimizer's parameters one to one, name and shape: what the optimizer's SetGradients()
// would refuse, checked without handing the gradients over.
void RequireGradientsFit(const GradientMap& gradients, const amp::IOptimizerState& optimizer,
                         const std::string& parameter);

}  // namespace mlframework::distributed::fsdp::detail
