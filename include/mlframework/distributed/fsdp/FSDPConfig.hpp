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
  /// ZeRO-3 inside groups of FSDPConfig::ShardGroupSize ranks (a node), replicated across the
  /// groups (PyTorch's HSDP / HYBRID_SHARD, DeepSpeed ZeRO++ hpZ): each unit is sharded over
  /// its shard group and gathered inside it, so the all-gathers stay within the node; gradients
  /// are reduce-scattered inside the shard group, then the shard is all-reduced across the
  /// replicate group (the ranks that hold the same shard), averaged over every rank.
  HybridShard,
};

/// Name of @p strategy ("FullShard", ...) for messages.
MLFRAMEWORK_EXPORT std::string_view ToString(ShardingStrategy strategy) noexcept;

/// What gradients travel as in FSDP's reductions (ZeRO++ qgZ, MS-AMP's FP8 all-reduce).
enum class GradientWire {
  /// Elements of the reduce dtype (FSDPConfig::ReduceDType / UnitPrecision::ReduceDType):
  /// FP32, or FP16 / BF16 summed in FP32 per element by the engine and rounded once.
  ReduceDType,
  /// FP8 E4M3FN codes with one FP32 power-of-two scale per kFloat8WireBlock (256) values of the
  /// sender (distributed/Float8BlockReduce.hpp), 1.016 bytes an element: each rank encodes its
  /// FP32 gradient, the parts are exchanged (all-to-all) and the receiver sums them in FP32 in
  /// rank order, landing the FP32 shard without a 16-bit rounding. The reduce dtype is not used.
  /// Each value is off by at most 2^-4 of itself (or 2^-17 of its block's largest magnitude)
  /// before the sum; an Inf or NaN on any rank arrives as NaN, so the overflow agreement and
  /// clipping, computed on the reduced FP32 shards as always, stay exact on what was reduced.
  /// HybridShard's all-reduce across replicas and NoShard's all-reduce use it too (an
  /// all-gather of the codes: each replica's sum is encoded once more, a second rounding).
  Float8Blocks,
};

/// Name of @p wire ("ReduceDType", "Float8Blocks") for messages.
MLFRAMEWORK_EXPORT std::string_view ToString(GradientWire wire) noexcept;

/// Configuration of an FSDP instance. Every rank must use the same values.
struct FSDPConfig {
  /// What is sharded.
  ShardingStrategy Strategy = ShardingStrategy::FullShard;
  /// Dtype parameters are gathered in and handed to the forward pass (PyTorch's param_dtype).
  /// The local FP32 shard is cast to it before the all-gather, so FP16/BF16 halve the traffic.
  /// Float32, Float16, BFloat16, or Float8E4M3FN / Float8E5M2: FP8 shards quantized with
  /// per-parameter scales agreed across ranks, a quarter of FP32's traffic
  /// (FSDPShardingUnit::Float8ScaleInverses()).
  DataType ParamDType = DataType::Float32;
  /// Dtype gradients are reduced in (PyTorch's reduce_dtype); the result lands in FP32 shards.
  /// Float32, Float16 or BFloat16 (never FP8: ArgumentError).
  DataType ReduceDType = DataType::Float32;
  /// What gradients travel as: the reduce dtype's elements (default) or FP8 blocks.
  GradientWire Wire = GradientWire::ReduceDType;
  /// Dtype of each rank's master shard (FSDPShardingUnit::LocalShard(), what the optimizer
  /// updates in place): Float32 (default), or BFloat16, half the bytes, for an optimizer that
  /// keeps BF16 masters (optimizers::AdamOptions::Masters / SGDOptions::Masters set to
  /// MasterFormat::BFloat16StochasticRounding, or BFloat16Remainder with its 16-bit remainders
  /// beside the shard: exact FP32 masters). FSDP::Step() refuses an optimizer whose master format
  /// does not match the shards (ArgumentError). Gradient shards stay FP32 either way, so clipping
  /// and the overflow agreement are unchanged; gathers cast the shard into ParamDType.
  DataType MasterDType = DataType::Float32;
  /// Elements each rank's shard is a whole multiple of (>= 1; 1: none): every unit is padded
  /// to a multiple of ranks x ShardAlignment (FSDPShardingUnit::PaddedSize()). Set it to the
  /// optimizer's block size (optimizers::AdamOptions::StateBlockSize) and every shard, at every
  /// world size, starts and ends on whole blocks of block-scaled states, so a resharding
  /// checkpoint moves their codes and scales bit for bit (no StateConversion::Convert) and
  /// training continues bit for bit at the new world size. The cost: up to ranks x
  /// ShardAlignment - 1 padding elements per unit.
  std::size_t ShardAlignment = 1;
  /// Where micro-batches without gradient sync (FSDP::SetRequiresGradientSync(false)) are summed.
  /// false (default, PyTorch's `no_sync`): each rank adds its full FP32 gradients into an
  /// unsharded accumulator (PaddedSize() floats per unit) and communicates nothing; the
  /// micro-batch with sync reduces that sum once. true: every micro-batch is reduced at once, as
  /// with sync, and added into the FP32 gradient shard, so only the shard (ShardSize() floats) is
  /// kept: 1/ranks of the accumulator's memory, for one reduction per micro-batch instead of one
  /// per step. The two sum the same values in a different order (see docs/fsdp.md, "Gradient
  /// accumulation"); with a 16-bit reduce dtype or the FP8 wire each micro-batch is rounded on
  /// the wire by itself. An Inf or NaN of any micro-batch stays in the shard, where the overflow
  /// check looks. NoShard keeps the whole gradient either way (it all-reduces each micro-batch).
  bool ShardedAccumulation = false;
  /// Broadcast rank 0's initial parameter values when a unit is registered, so ranks that
  /// initialized differently start from the same weights (PyTorch's sync_module_states).
  bool SyncModuleStates = false;
  /// HybridShard only (0 otherwise): ranks per shard group, >= 1 and dividing the world size.
  /// Consecutive ranks shard together, as the ranks of a node usually are numbered: ranks
  /// [g x S, (g + 1) x S) form shard group g, and the ranks with the same `rank % S` (one per
  /// shard group, holding equal shards) form a replicate group. S = 1 replicates everything
  /// (DDP); S = the world size is FullShard.
  int ShardGroupSize = 0;

  /// ArgumentError naming the first invalid field and its value.
  MLFRAMEWORK_EXPORT void Validate() const;
};

}  // namespace mlframework::distributed::fsdp
