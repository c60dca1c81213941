#pragma once
// Private: the blob of one rank of a resharding FSDP checkpoint, its encoder and its decoder.
//
// Payload (in a StateBlob frame of kind "distributed.fsdp.ShardedCheckpoint", whose checksum
// covers every byte; integers little-endian, f32/f64 IEEE-754 binary32/binary64 in the machine's order):
//   u32 saved world size | u32 saved rank | u8 strategy (ShardingStrategy) | i64 training step
//   optimizer: u8 kind (0 none, 1 SGD, 2 Adam, 3 another kind: u32 name length | name follow) |
//              u32 option count | f64 options (IOptimizerState::StateOptions() but the learning
//              rate) | f64 learning rate | i64 step count | u32 per-element state vectors per
//              unit (SGD 1, Adam 2)
//   scaler:    u8 present | u64 length | bytes
//   u64 unit count, then per unit:
//     u32 name length | name | u8 dtype of the master shard (DataType::Float32 or BFloat16;
//     Float32 before version 4)
//     u64 elements | u64 padded size | u64 first element of this rank | u64 elements of this rank
//     u32 parameter count, per parameter: u32 name length | name | u32 rank | u64 extents | u64 offset
//     (version 4) u8 MasterFormat: Float32 with a Float32 shard, BFloat16StochasticRounding or
//       BFloat16Remainder with a BFloat16 one
//     the master shard: f32 x (elements of this rank), or bf16 x (elements of this rank) and,
//       under BFloat16Remainder, u16 x (elements of this rank) remainders
//     per optimizer state vector: u8 present, when present: u8 StateFormat | u64 block size |
//       the stored elements of this rank (4, 2 or 1 bytes each) | f32 x StateBlockCount(elements,
//       block size) scales for the block-scaled formats (none otherwise; none for Float16 before
//       version 5, whose FP16 values had no scales)
//     (version 2: per vector u8 present | f32 x (elements of this rank), FP32 state)
// The values are the rank's range [first, first + count) of the unit's flat, zero-padded buffer;
// a block-scaled state's blocks start at the rank's first element.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/OptimizerStep.hpp>

namespace mlframework::distributed::fsdp::detail {

inline constexpr char kCheckpointKind[] = "distributed.fsdp.ShardedCheckpoint";

struct SavedParameter {
  std::string name;
  Shape shape;
  std::uint64_t offset = 0;
};

// The optimizer's record (amp::IOptimizerState in plain form).
struct SavedOptimizer {
  std::string kind;  // IOptimizerState::StateKind(); empty: no optimizer state
  std::vector<double> options;
  double learning_rate = 0.0;
  std::int64_t steps = 0;
  std::uint32_t states = 0;  // per-element state vectors per unit
  // IOptimizerState::StateRoundingSeed(), stored since version 6 (absent: the load keeps the
  // loading optimizer's own).
  std::uint64_t rounding_seed = 0;
  bool has_rounding_seed = false;
};

// @p saved's kind, "none" when empty.
std::string KindName(const SavedOptimizer& saved);
// ArgumentError naming contents.Optimizer unless a blob can hold @p saved: a kind name of at
// most 4096 bytes, at most 16 options and 16 state vectors, and for the kinds "SGD" and "Adam"
// the library's counts (3 options and 1 vector, 5 options and 2 vectors).
void CheckStorable(const SavedOptimizer& saved);

// One optimizer state vector of a rank's range, as its optimizer stores it.
struct SavedState {
  bool present = false;
  StateFormat format = StateFormat::Float32;
  std::uint64_t block_size = kDefaultStateBlockSize;
  std::span<const std::byte> codes{};   // count elements
  std::span<const std::byte> scales{};  // block-scaled: StateBlockCount(count, block_size) FP32 values
  bool unscaled_float16 = false;        // Float16 before version 5: plain FP16 values, no scales
};

struct SavedUnit {
  std::string name;
  std::uint64_t numel = 0;
  std::uint64_t padded = 0;
  std::uint64_t first = 0;  // this rank's range of the padded buffer
  std::uint64_t count = 0;
  std::vector<SavedParameter> parameters;
  MasterFormat master_format = MasterFormat::Float32;
  std::span<const std::byte> master;      // count FP32 values, or BF16 values under a BF16 format
  std::span<const std::byte> remainders;  // BFloat16Remainder: count 16-bit remainders; else empty
  std::vector<SavedState> states;         // per optimizer state vector
};

struct SavedRank {
  std::uint32_t world = 0;
  std::uint32_t rank = 0;
  std::uint8_t strategy = 0;
  std::int64_t step = 0;
  SavedOptimizer optimizer;
  bool has_scaler = false;
  std::span<const std::byte> scaler;
  std::vector<SavedUnit> units;
};

// The blob of @p saved (spans are read, not kept).
std::vector<std::byte> EncodeCheckpoint(const SavedRank& saved);
// Decodes and checks a blob on its own (frame, version, bounds, layout sanity); the spans of
// the result point into @p blob. ArgumentError naming @p parameter otherwise.
SavedRank DecodeCheckpoint(std::span<const std::byte> blob, const std::string& parameter);
// Checks that @p ranks (decoded from the blobs named saved_ranks[i]) are the blobs of one
// checkpoint: one per saved rank, the same world size, step, strategy, optimizer, scaler state
// and unit layouts, ranges that cover every unit, state vectors present alike. ArgumentError
// naming the first difference otherwise.
void CheckOneCheckpoint(const std::vector<SavedRank>& ranks);

}  // namespace mlframework::distributed::fsdp::detail
