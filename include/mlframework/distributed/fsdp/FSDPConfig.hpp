#pragma once
/// @file FSDPConfig.hpp
/// @brief How FSDP shards, gathers and reduces (PyTorch's ShardingStrategy and MixedPrecision).

#include <string_view>

#include <mlframework/core/DataType.hpp>
#include <mlframework/export.hpp>

namespace mlframework::distributed::fsdp {

/// What is sharded across ranks (PyTorch FSDP's ShardingStrategy; DeepSpeed ZeRO stages).
enum class ShardingStrategy {
  /// ZeRO-3: parameters, gradients and optimizer state sharded; each unit is gathered
  /// before use and freed after.
  FullShard,
  /// ZeRO-2: gradients and optimizer state sharded; parameters stay gathered between
  /// optimizer steps (gathered again once after each step).
  ShardGradOp,
  /// DDP: nothing sharded; every rank holds all parameters and gradients are all-reduced.
  NoShard,
};

/// Name of @p strategy ("FullShard", ...) for messages.
MLFRAMEWORK_EXPORT std::string_view ToString(ShardingStrategy strategy) noexcept;

/// Configuration of an FSDP instance. Every rank must use the same values.
struct FSDPConfig {
  /// What is sharded.
  ShardingStrategy Strategy = ShardingStrategy::FullShard;
  /// Dtype parameters are gathered in and handed to the forward pass (PyTorch's param_dtype).
  /// The local FP32 shard is cast to it before the all-gather, so FP16/BF16 halve the traffic.
  /// Float32, Float16 or BFloat16 (FP8 is refused: its shards need their scales).
  DataType ParamDType = DataType::Float32;
  /// Dtype gradients are reduced in (PyTorch's reduce_dtype); the result lands in FP32 shards.
  /// Float32, Float16 or BFloat16.
  DataType ReduceDType = DataType::Float32;
  /// Broadcast rank 0's initial parameter values when a unit is registered, so ranks that
  /// initialized differently start from the same weights (PyTorch's sync_module_states).
  bool SyncModuleStates = false;

  /// ArgumentError naming the first invalid field and its value.
  MLFRAMEWORK_EXPORT void Validate() const;
};

}  // namespace mlframework::distributed::fsdp
