#pragma once
/// @file ShardedCheckpoint.hpp
/// @brief What a resharding FSDP checkpoint holds besides the shards, and its file names.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <mlframework/amp/IOptimizer.hpp>
#include <mlframework/amp/IOptimizerState.hpp>
#include <mlframework/export.hpp>

namespace mlframework::distributed::fsdp {

/// An object whose state is a blob, for a checkpoint to save and restore: typically the loss
/// scaler (amp::GradScaler, amp::DynamicLossScaler, FSDPMixedPrecisionManager, ...), whose
/// state is the same on every rank. Of() builds it from any type with `StateDict()` and
/// `LoadStateDict(std::span<const std::byte>)`.
struct BlobState {
  /// Returns the current state (the object's StateDict()).
  std::function<std::vector<std::byte>()> Save{};
  /// Restores a state from Save(); must validate it whole before changing anything and throw
  /// ArgumentError for a bad one (every library StateDict() type does).
  std::function<void(std::span<const std::byte>)> Load{};

  /// True when both functions are set.
  explicit operator bool() const noexcept { return Save && Load; }

  /// The StateDict() / LoadStateDict() pair of @p object, kept by reference.
  template <typename T>
  static BlobState Of(T& object) {
    return {[&object] { return object.StateDict(); },
            [&object](std::span<const std::byte> state) { object.LoadStateDict(state); }};
  }
};

/// What FSDP::SaveShardedCheckpoint() stores with the master shards and what
/// FSDP::LoadShardedCheckpoint() restores.
struct ShardedCheckpointContents {
  /// The optimizer built over FSDP::ShardedParameters(), whose state travels through the
  /// amp::IOptimizerState its IOptimizer::State() hands out: optimizers::Adam (moments, step
  /// count), optimizers::SGD (momentum buffers, step count) or your own. Its per-element state
  /// vectors are sharded like the masters and resharded with them. Its kind and options are
  /// stored: a load needs an optimizer of the same kind and options, except the learning rate,
  /// which is restored (a scheduler changes it), and the rounding seed of stochastic rounding
  /// (amp::IOptimizerState::StateRoundingSeed()), which is restored so that the resumed run draws
  /// the saved run's random bits. An optimizer whose State() is null is an
  /// ArgumentError. Null: no optimizer state (a load with null skips a saved one).
  amp::IOptimizer* Optimizer = nullptr;
  /// The loss scaler's (or any replicated object's) state, stored in every rank's blob and
  /// required equal across the saved ranks. Empty: none (a load without it skips a saved one).
  BlobState Scaler{};
  /// The training step to store (SaveShardedCheckpoint); LoadShardedCheckpoint() returns the
  /// stored one and ignores this field.
  std::int64_t Step = 0;
  /// LoadShardedCheckpoint(): whether an optimizer state vector may be re-encoded. Each vector is
  /// stored as the optimizer keeps it (amp::IOptimizerState::StoredState(): format, block size,
  /// codes, scales). It loads bit for bit when the loading optimizer keeps it in the same format
  /// and, for the block-scaled formats, the same block size and every saved and loading shard
  /// starts on a multiple of the block size (the blocks of every shard are then blocks of one
  /// grid over the unit's flat buffer; a shard that ends inside a block ends in the unit's
  /// padding). Otherwise the vector is decoded into FP32 and encoded in the loading optimizer's
  /// format at its shard's blocks, which needs amp::StateConversion::Convert here; without it
  /// the load is an ArgumentError naming `contents.Conversion`, the unit and the vector.
  /// The masters likewise: stored as the units kept them (FP32; BF16 shards with or without
  /// remainders, FSDPConfig::MasterDType and the optimizer's MasterFormat), they load bit for bit
  /// at any world size into the same format, and into another one only with Convert (FP32 into
  /// BF16 rounds to nearest even, dropping a remainder rounds, BF16 into FP32 or into BF16 with a
  /// remainder is exact). A unit whose BF16 shard has no optimizer keeps no remainder.
  amp::StateConversion Conversion = amp::StateConversion::None;
};

/// Format version FSDP::SaveShardedCheckpoint() writes (blob kind "distributed.fsdp.ShardedCheckpoint").
/// 6: the optimizer's rounding seed (amp::IOptimizerState::StateRoundingSeed(), restored by a
/// load; an older checkpoint leaves the loading optimizer's own);
/// 5: Float16 optimizer states block-scaled (their scales stored as the 8-bit formats' are);
/// 4: each unit's master shard dtype and MasterFormat (BF16 shards, with their remainders under
/// BFloat16Remainder); 3: each optimizer state vector's format, block size and scales; 2: the
/// optimizer options as doubles. Every older version still loads; a Float16 state of versions 3
/// and 4 (plain FP16 values) loads converted to the block-scaled Float16 format, with or without
/// amp::StateConversion::Convert.
inline constexpr std::uint16_t kShardedCheckpointVersion = 6;

/// File of @p rank in a checkpoint directory: "shard-00003.mlfw" for rank 3 (five digits, more
/// when the rank needs them). ArgumentError for a negative rank.
MLFRAMEWORK_EXPORT std::string ShardedCheckpointFileName(int rank);

/// Writes @p blob to @p path atomically: to "<path>.tmp" first, then renamed over @p path, so a
/// crash never leaves a half-written file under the final name. ArgumentError naming `path`
/// when it cannot be written.
MLFRAMEWORK_EXPORT void WriteCheckpointFile(const std::filesystem::path& path, std::span<const std::byte> blob);
/// The whole file at @p path; ArgumentError naming `path` when it cannot be read.
MLFRAMEWORK_EXPORT std::vector<std::byte> ReadCheckpointFile(const std::filesystem::path& path);
/// Every "shard-*.mlfw" file in @p directory, in file name order (so in rank order); which
/// ranks they hold is checked by the load. ArgumentError naming `directory` when it is not a
/// directory, holds no shard file or a file cannot be read.
MLFRAMEWORK_EXPORT std::vector<std::vector<std::byte>> ReadShardedCheckpointDirectory(
    const std::filesystem::path& directory);

}  // namespace mlframework::distributed::fsdp
