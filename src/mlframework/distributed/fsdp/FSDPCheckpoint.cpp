// FSDP's resharding checkpoints: save at N ranks, load at M (the format: CheckpointFormat.hpp).
#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <mlframework/amp/IOptimizerState.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/distributed/AbortGuard.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>

#include "mlframework/core/StateCodes.hpp"
#include "mlframework/distributed/Agreement.hpp"
#include "mlframework/distributed/fsdp/CheckpointFormat.hpp"
#include "mlframework/distributed/fsdp/Hooks.hpp"
#include "mlframework/distributed/fsdp/MasterShards.hpp"
#include "mlframework/optimizers/StateList.hpp"

namespace mlframework::distributed::fsdp {

namespace {

using detail::SavedRank;
using detail::SavedUnit;

// The state of ShardedCheckpointContents' optimizer (null for none). ArgumentError unless the
// optimizer hands its state out and is built over @p fsdp's ShardedParameters().
amp::IOptimizerState* StateOf(amp::IOptimizer* optimizer, const FSDP& fsdp) {
  if (optimizer == nullptr) return nullptr;
  amp::IOptimizerState* state = optimizer->State();
  if (state == nullptr) {
    throw ArgumentError("contents.Optimizer",
                        "hands out no state (its IOptimizer::State() is null): a resharding checkpoint moves an "
                        "optimizer's per-element state through amp::IOptimizerState (implement it, or save the "
                        "optimizer's state on its own)");
  }
  const GradientMap shards = fsdp.ShardedParameters();
  const GradientMap& parameters = state->Parameters();
  for (const auto& [name, shard] : shards) {
    const auto it = parameters.find(name);
    if (it == parameters.end() || it->second.get() != shard.get() || parameters.size() != shards.size()) {
      throw ArgumentError("contents.Optimizer", "this " + state->StateKind() +
                                                    " is not built over this FSDP's ShardedParameters() (unit '" +
                                                    name + "' differs): its state cannot follow the shards");
    }
  }
  return state;
}

// The stored description of @p state (none for null): options but the learning rate.
detail::SavedOptimizer Describe(const amp::IOptimizerState* state) {
  detail::SavedOptimizer saved;
  if (state == nullptr) return saved;
  saved.kind = state->StateKind();
  if (saved.kind.empty()) throw ArgumentError("contents.Optimizer", "has an empty state kind (StateKind())");
  for (const auto& option : state->StateOptions()) saved.options.push_back(option.second);
  saved.learning_rate = state->StateLearningRate();
  saved.steps = state->StepCount();
  saved.rounding_seed = state->StateRoundingSeed();
  saved.has_rounding_seed = true;
  saved.states = static_cast<std::uint32_t>(std::min<std::size_t>(state->StateVectorNames().size(), UINT32_MAX));
  detail::CheckStorable(saved);
  return saved;
}

std::span<const std::byte> BytesOf(std::span<const float> values) { return std::as_bytes(values); }

// The record of @p stored, a state vector of @p unit's shard (@p what names it): ArgumentError
// naming contents.Optimizer unless it is a known format with a valid block size, holding the
// shard's elements and its blocks' scales.
detail::SavedState Saved(const amp::StoredStateVector& stored, const FSDPShardingUnit& unit, const std::string& what) {
  detail::SavedState state{.present = !stored.Codes.empty()};
  if (!state.present) return state;
  const auto format = static_cast<unsigned>(stored.Format);
  if (format > static_cast<unsigned>(StateFormat::Float8E4M3Block)) {
    throw ArgumentError("contents.Optimizer", what + " of unit '" + unit.Name() + "' has format " +
                                                  std::to_string(format) + ", not a StateFormat");
  }
  state.format = stored.Format;
  const bool scaled = IsBlockScaled(stored.Format);
  state.block_size = scaled ? stored.BlockSize : kDefaultStateBlockSize;
  const std::size_t block = state.block_size;
  const std::size_t element = ElementSize(StateStorageDType(stored.Format));
  const std::size_t scales = scaled ? StateBlockCount(unit.ShardSize(), block) : 0;
  if (block < 32 || block > 2048 || (block & (block - 1)) != 0 || stored.Codes.size() != unit.ShardSize() * element ||
      stored.Scales.size() != scales) {
    throw ArgumentError("contents.Optimizer",
                        what + " of unit '" + unit.Name() + "' holds " + std::to_string(stored.Codes.size()) +
                            " bytes and " + std::to_string(stored.Scales.size()) + " scales in blocks of " +
                            std::to_string(block) + "; the shard's " + std::to_string(unit.ShardSize()) +
                            " elements of " + ToString(stored.Format) + " take " +
                            std::to_string(unit.ShardSize() * element) + " and " + std::to_string(scales));
  }
  state.codes = stored.Codes;
  state.scales = std::as_bytes(stored.Scales);
  return state;
}

// The trailing checksums of @p blobs (each frame's FNV-1a, StateBlob.hpp), sorted (the blobs
// may come in any order) and folded with FNV-1a, cut to 52 bits so it travels exactly in a
// double. The blobs were validated before, so each has its 8 checksum bytes.
double Fingerprint(std::span<const std::vector<std::byte>> blobs) {
  std::vector<std::uint64_t> checksums;
  checksums.reserve(blobs.size());
  for (const std::vector<std::byte>& blob : blobs) {
    std::uint64_t checksum = 0;
    std::memcpy(&checksum, blob.data() + blob.size() - sizeof checksum, sizeof checksum);
    checksums.push_back(checksum);
  }
  std::sort(checksums.begin(), checksums.end());
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const std::uint64_t checksum : checksums) {
    hash ^= checksum;
    hash *= 0x100000001b3ULL;
  }
  return static_cast<double>(hash & ((1ULL << 52) - 1));
}

// ArgumentError unless the saved model is this FSDP's: units, parameters, shapes, offsets.
void CheckSameModel(const SavedRank& saved, FSDP& fsdp) {
  const auto fail = [](const std::string& what) {
    throw ArgumentError("saved_ranks", "the checkpoint is of another model: " + what);
  };
  if (saved.units.size() != fsdp.UnitCount()) {
    fail("it holds " + std::to_string(saved.units.size()) + " units, this FSDP has " +
         std::to_string(fsdp.UnitCount()));
  }
  for (std::size_t u = 0; u < saved.units.size(); ++u) {
    const SavedUnit& mine = saved.units[u];
    const FSDPShardingUnit& unit = fsdp.Unit(u);
    if (mine.name != unit.Name()) {
      fail("unit " + std::to_string(u) + " is '" + mine.name + "' in the checkpoint, '" + unit.Name() + "' here");
    }
    const std::vector<std::string>& names = unit.ParameterNames();
    if (mine.parameters.size() != names.size() || mine.numel != unit.NumElements()) {
      fail("unit '" + mine.name + "' has " + std::to_string(mine.parameters.size()) + " parameters of " +
           std::to_string(mine.numel) + " elements in the checkpoint, " + std::to_string(names.size()) + " of " +
           std::to_string(unit.NumElements()) + " here");
    }
    for (std::size_t p = 0; p < names.size(); ++p) {
      const detail::SavedParameter& parameter = mine.parameters[p];
      const Shape& shape = unit.ParameterShape(names[p]);
      if (parameter.name != names[p] || parameter.shape != shape) {
        fail("parameter " + std::to_string(p) + " of unit '" + mine.name + "' is '" + parameter.name + "' " +
             mlframework::ToString(parameter.shape) + " in the checkpoint, '" + names[p] + "' " +
             mlframework::ToString(shape) + " here");
      }
    }
  }
}

// ArgumentError unless the live optimizer matches the saved one (kind, options but the
// learning rate, which a load restores, and the number of state vectors).
void CheckSameOptimizer(const detail::SavedOptimizer& saved, const amp::IOptimizerState* live) {
  if (live == nullptr) return;  // the caller skips the saved state
  const std::string kind = live->StateKind();
  if (saved.kind != kind) {
    throw ArgumentError("contents.Optimizer",
                        "is " + kind + " but the checkpoint holds " + detail::KindName(saved) + " state");
  }
  const std::vector<std::pair<std::string, double>> options = live->StateOptions();
  const std::size_t vectors = live->StateVectorNames().size();
  if (saved.options.size() != options.size() || saved.states != vectors) {
    throw ArgumentError("contents.Optimizer", kind + " has " + std::to_string(options.size()) + " options and " +
                                                  std::to_string(vectors) + " state vectors, the checkpoint's " +
                                                  std::to_string(saved.options.size()) + " and " +
                                                  std::to_string(saved.states));
  }
  for (std::size_t i = 0; i < options.size(); ++i) {
    // Compared as bits: a NaN in a corrupt blob must not pass as equal either.
    if (std::bit_cast<std::uint64_t>(saved.options[i]) != std::bit_cast<std::uint64_t>(options[i].second)) {
      throw ArgumentError("contents.Optimizer", kind + " option " + options[i].first + " is " +
                                                    std::to_string(saved.options[i]) + " in the checkpoint, " +
                                                    std::to_string(options[i].second) + " here");
    }
  }
  if (!std::isfinite(saved.learning_rate) || !(saved.learning_rate > 0.0)) {
    throw ArgumentError("saved_ranks", "the stored learning rate " + std::to_string(saved.learning_rate) +
                                           " is not finite and positive");
  }
}

// This rank's range of unit @p u under the new sharding, @p element bytes per element, copied
// from the ranges of the saved ranks that overlap it (@p bytes_of(i, range): the bytes of saved
// rank i's range); the padding stays zero, as registered.
template <typename Source>
std::vector<std::byte> Reshard(const std::vector<SavedRank>& ranks, std::size_t u, const FSDPShardingUnit& unit,
                               std::size_t element, Source&& bytes_of) {
  const std::uint64_t first = unit.ShardOffset();
  const std::uint64_t last = std::min<std::uint64_t>(first + unit.ShardSize(), unit.NumElements());
  std::vector<std::byte> values(unit.ShardSize() * element, std::byte{0});
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const SavedUnit& saved = ranks[i].units[u];
    const std::uint64_t begin = std::max(first, saved.first);
    const std::uint64_t end = std::min(last, saved.first + saved.count);
    if (begin >= end) continue;
    const std::span<const std::byte> bytes = bytes_of(i, saved);
    std::memcpy(values.data() + (begin - first) * element, bytes.data() + (begin - saved.first) * element,
                (end - begin) * element);
  }
  return values;
}

std::vector<float> AsFloats(std::span<const std::byte> bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

std::vector<std::uint16_t> AsHalves(std::span<const std::byte> bytes) {
  std::vector<std::uint16_t> values(bytes.size() / sizeof(std::uint16_t));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(std::uint16_t));
  return values;
}

// The master shard of unit @p u under the new sharding, in FP32 (exact for every MasterFormat),
// for a unit whose masters are kept as @p live: the saved format, or another one when
// @p conversion allows (into BF16 rounded to nearest even by the commit; a remainder dropped).
// ArgumentError naming contents.Conversion for another format without it, naming saved_ranks for
// a value the BF16 shard cannot hold.
std::vector<float> ReshardMasters(const std::vector<SavedRank>& ranks, std::size_t u, const FSDPShardingUnit& unit,
                                  MasterFormat live, amp::StateConversion conversion) {
  const MasterFormat saved = ranks.front().units[u].master_format;
  if (saved != live && conversion != amp::StateConversion::Convert) {
    throw ArgumentError("contents.Conversion",
                        "the masters of unit '" + unit.Name() + "' are stored as " + ToString(saved) +
                            " and kept here as " + ToString(live) + " (the unit's MasterDType " +
                            std::string(ToString(unit.MasterDType())) + " and the optimizer's Masters)" +
                            ": set it to StateConversion::Convert to convert them (not bit for bit into BF16)");
  }
  if (saved == MasterFormat::Float32) {
    std::vector<float> values = AsFloats(
        Reshard(ranks, u, unit, sizeof(float), [](std::size_t, const SavedUnit& range) { return range.master; }));
    if (live != MasterFormat::Float32) {
      for (std::size_t i = 0; i < values.size(); ++i) {
        const float value = values[i];
        if (std::isfinite(value) &&
            !std::isfinite(mlframework::detail::BFloat16BitsToFloat(mlframework::detail::FloatToBFloat16Bits(value)))) {
          throw ArgumentError("saved_ranks", "master weight " + std::to_string(unit.ShardOffset() + i) + " of unit '" +
                                                 unit.Name() + "' is " + std::to_string(value) +
                                                 ", which overflows the unit's BFloat16 master shard");
        }
      }
    }
    return values;
  }
  const std::vector<std::uint16_t> bits = AsHalves(
      Reshard(ranks, u, unit, sizeof(std::uint16_t), [](std::size_t, const SavedUnit& range) { return range.master; }));
  std::vector<std::uint16_t> remainders(bits.size(), 0);
  if (saved == MasterFormat::BFloat16Remainder) {
    remainders = AsHalves(Reshard(ranks, u, unit, sizeof(std::uint16_t),
                                  [](std::size_t, const SavedUnit& range) { return range.remainders; }));
  }
  std::vector<float> values(bits.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = mlframework::detail::MasterFromRemainder(bits[i], remainders[i]);
  }
  return values;
}

// Unit @p unit's master shard as a checkpoint stores it in @p record, kept as @p format: the FP32
// shard as it lies (or read back into @p floats), or the BF16 shard's bits in @p halves and under
// BFloat16Remainder the remainders split from the optimizer's exact FP32 masters.
void SaveMasters(const FSDPShardingUnit& unit, MasterFormat format, const amp::IOptimizerState* optimizer,
                 SavedUnit& record, std::deque<std::vector<float>>& floats,
                 std::deque<std::vector<std::uint16_t>>& halves) {
  record.master_format = format;
  const TensorPtr shard = unit.LocalShard();
  if (format == MasterFormat::Float32) {
    record.master = shard->HostBytes();
    if (record.master.empty()) {
      floats.push_back(shard->ToFloatVector());
      record.master = BytesOf(floats.back());
    }
    return;
  }
  const std::vector<float> values =
      format == MasterFormat::BFloat16Remainder ? optimizer->StateMasterValues(unit.Name()) : shard->ToFloatVector();
  if (values.size() != unit.ShardSize()) {
    throw ArgumentError("contents.Optimizer", "hands out " + std::to_string(values.size()) +
                                                  " master weights for unit '" + unit.Name() + "', whose shard has " +
                                                  std::to_string(unit.ShardSize()));
  }
  std::vector<std::uint16_t>& bits = halves.emplace_back(values.size());
  std::vector<std::uint16_t>& remainders = halves.emplace_back();
  if (format == MasterFormat::BFloat16Remainder) remainders.resize(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (format == MasterFormat::BFloat16Remainder) {
      mlframework::detail::SplitMaster(values[i], &bits[i], &remainders[i]);
    } else {
      bits[i] = mlframework::detail::FloatToBFloat16Bits(values[i]);  // exact: the values are BF16
    }
  }
  record.master = std::as_bytes(std::span<const std::uint16_t>(bits));
  record.remainders = std::as_bytes(std::span<const std::uint16_t>(remainders));
}

// True when a range [first, first + count) of a unit of @p numel elements cuts no block of
// @p block elements of the unit's grid: it starts on a block, and ends on one or in the padding.
bool OnBlocks(std::uint64_t first, std::uint64_t count, std::uint64_t numel, std::uint64_t block) {
  return first % block == 0 && (count % block == 0 || first + count >= numel);
}

// Optimizer state vector @p v of unit @p u under the new sharding, in @p live's format and block
// size: the saved codes and scales where they carry over bit for bit (see
// ShardedCheckpointContents::Conversion), else decoded and encoded when @p conversion allows.
amp::StoredStateValues ReshardState(const std::vector<SavedRank>& ranks, std::size_t u, const FSDPShardingUnit& unit,
                                    std::size_t v, const amp::StoredStateVector& live,
                                    amp::StateConversion conversion) {
  const detail::SavedState& saved = ranks.front().units[u].states[v];
  const std::uint64_t numel = unit.NumElements();
  const bool scaled = IsBlockScaled(saved.format);
  bool on_blocks = !scaled || live.BlockSize == saved.block_size;
  // Plain FP16 values of an older checkpoint (a rank's blob may be one): decoded, and encoded as
  // the block-scaled Float16 format without asking for a conversion.
  const bool unscaled =
      std::ranges::any_of(ranks, [&](const SavedRank& r) { return r.units[u].states[v].unscaled_float16; });
  const bool rescale = unscaled && live.Format == StateFormat::Float16;
  for (const SavedRank& rank : ranks) {
    const SavedUnit& range = rank.units[u];
    on_blocks = on_blocks && (!scaled || OnBlocks(range.first, range.count, numel, saved.block_size));
  }
  on_blocks = on_blocks && (!scaled || OnBlocks(unit.ShardOffset(), unit.ShardSize(), numel, saved.block_size));
  const std::string what = "optimizer state vector " + std::to_string(v) + " of unit '" + unit.Name() + "'";
  const std::size_t element = ElementSize(StateStorageDType(saved.format));
  if (saved.format == live.Format && on_blocks && !unscaled) {
    amp::StoredStateValues out{.Format = saved.format, .BlockSize = live.BlockSize, .Codes = {}, .Scales = {}};
    out.Codes =
        Reshard(ranks, u, unit, element, [v](std::size_t, const SavedUnit& range) { return range.states[v].codes; });
    if (scaled) {
      // Each block of the new range is a block of the saved ranges' grid: its scale carries over
      // (a block wholly in the padding is zero, as the step would encode it).
      out.Scales.assign(StateBlockCount(unit.ShardSize(), saved.block_size), 0.0f);
      for (std::size_t b = 0; b < out.Scales.size(); ++b) {
        const std::uint64_t g = unit.ShardOffset() + b * saved.block_size;
        for (const SavedRank& rank : ranks) {
          const SavedUnit& range = rank.units[u];
          if (g < numel && g >= range.first && g < range.first + range.count) {
            std::memcpy(&out.Scales[b], range.states[v].scales.data() + (g - range.first) / saved.block_size * 4, 4);
          }
        }
      }
    }
    return out;
  }
  if (conversion != amp::StateConversion::Convert && !rescale) {
    throw ArgumentError(
        "contents.Conversion",
        what + " is stored as " + ToString(saved.format) +
            (scaled ? " in blocks of " + std::to_string(saved.block_size) : std::string()) +
            " and the optimizer keeps " + ToString(live.Format) +
            (IsBlockScaled(live.Format) ? " in blocks of " + std::to_string(live.BlockSize) : std::string()) +
            (saved.format != live.Format ? ""
             : scaled && live.BlockSize != saved.block_size
                 ? ", in blocks of another size"
                 : ", but the saved or loading shards do not fall on whole blocks") +
            ": set it to StateConversion::Convert to re-encode the state (not bit for bit)");
  }
  // Decoded per saved range into FP32, cut like the masters, encoded at this shard's blocks.
  std::vector<std::vector<float>> decoded;
  for (const SavedRank& rank : ranks) {
    const detail::SavedState& state = rank.units[u].states[v];
    const std::vector<float> scales = AsFloats(state.scales);
    decoded.push_back(optimizers::detail::DecodeState(
        {.Format = state.format, .BlockSize = state.block_size, .Codes = state.codes, .Scales = scales}));
  }
  const std::vector<float> values =
      AsFloats(Reshard(ranks, u, unit, sizeof(float), [&](std::size_t i, const SavedUnit&) {
        return std::as_bytes(std::span<const float>(decoded[i]));
      }));
  optimizers::detail::StateRecord record = optimizers::detail::EncodeState(
      values, live.Format, live.BlockSize, live.KeepPositive, "saved_ranks", what + " (converted)");
  return {.Format = record.format,
          .BlockSize = record.block_size,
          .Codes = std::move(record.codes),
          .Scales = std::move(record.scales)};
}

}  // namespace

std::vector<std::byte> FSDP::SaveShardedCheckpoint(const ShardedCheckpointContents& contents) const {
  if (contents.Step < 0) throw ArgumentError("contents.Step", "must be >= 0, got " + std::to_string(contents.Step));
  amp::IOptimizerState* const optimizer = StateOf(contents.Optimizer, *this);
  SavedRank saved;
  saved.world = static_cast<std::uint32_t>(ProcessGroup().WorldSize());
  saved.rank = static_cast<std::uint32_t>(ProcessGroup().Rank());
  saved.strategy = static_cast<std::uint8_t>(Config().Strategy);
  saved.step = contents.Step;
  saved.optimizer = Describe(optimizer);
  std::vector<std::byte> scaler;
  if (contents.Scaler) {
    scaler = contents.Scaler.Save();
    saved.has_scaler = true;
    saved.scaler = scaler;
  }
  // Shards the host cannot address are read back (a checkpoint, not a step) and BF16 masters are
  // split into bits and remainders; kept alive here.
  std::deque<std::vector<float>> read_back;
  std::deque<std::vector<std::uint16_t>> halves;
  for (std::size_t u = 0; u < UnitCount(); ++u) {
    const FSDPShardingUnit& unit = const_cast<FSDP*>(this)->Unit(u);
    SavedUnit record;
    record.name = unit.Name();
    record.numel = unit.NumElements();
    record.padded = unit.PaddedSize();
    record.first = unit.ShardOffset();
    record.count = unit.ShardSize();
    std::uint64_t offset = 0;  // the parameters lie back to back in layout order
    for (const std::string& name : unit.ParameterNames()) {
      const Shape& shape = unit.ParameterShape(name);
      record.parameters.push_back({name, shape, offset});
      offset += ElementCount(shape);
    }
    detail::RequireMatchingMasters(unit, optimizer, "contents.Optimizer");
    SaveMasters(unit, detail::ShardMasterFormat(unit, optimizer), optimizer, record, read_back, halves);
    for (std::uint32_t v = 0; v < saved.optimizer.states; ++v) {
      const amp::StoredStateVector stored = optimizer->StoredState(unit.Name(), v);
      record.states.push_back(Saved(stored, unit, saved.optimizer.kind + " state vector " + std::to_string(v)));
    }
    saved.units.push_back(std::move(record));
  }
  return detail::EncodeCheckpoint(saved);
}

std::int64_t FSDP::LoadShardedCheckpoint(std::span<const std::vector<std::byte>> saved_ranks,
                                         const ShardedCheckpointContents& contents) {
  IProcessGroup& group = ProcessGroup();
  std::vector<std::vector<float>> masters;  // per unit, this rank's new range
  std::map<std::string, amp::OptimizerStoredParameterState> optimizer_state;
  amp::IOptimizerState* optimizer = nullptr;
  detail::SavedOptimizer saved_optimizer;
  std::vector<std::byte> scaler_backup;
  std::vector<std::byte> scaler_state;
  std::int64_t step = 0;

  distributed::detail::AgreeOn(group, "FSDP::LoadShardedCheckpoint", [&] {
    detail::RefuseLoadWhileBusy(*this);
    optimizer = StateOf(contents.Optimizer, *this);
    std::vector<SavedRank> ranks;
    ranks.reserve(saved_ranks.size());
    for (std::size_t i = 0; i < saved_ranks.size(); ++i) {
      ranks.push_back(detail::DecodeCheckpoint(saved_ranks[i], "saved_ranks[" + std::to_string(i) + "]"));
    }
    detail::CheckOneCheckpoint(ranks);
    const SavedRank& first = ranks.front();
    CheckSameModel(first, *this);
    if (optimizer != nullptr && first.optimizer.kind.empty()) {
      throw ArgumentError("contents.Optimizer", "is set but the checkpoint holds no optimizer state");
    }
    CheckSameOptimizer(first.optimizer, optimizer);
    if (contents.Scaler && !first.has_scaler) {
      throw ArgumentError("contents.Scaler", "is set but the checkpoint holds no scaler state");
    }
    if (contents.Scaler) {
      scaler_state.assign(first.scaler.begin(), first.scaler.end());
      scaler_backup = contents.Scaler.Save();
    }
    saved_optimizer = first.optimizer;
    step = first.step;
    for (std::size_t u = 0; u < UnitCount(); ++u) {
      const FSDPShardingUnit& unit = Unit(u);
      detail::RequireMatchingMasters(unit, optimizer, "contents.Optimizer");
      masters.push_back(
          ReshardMasters(ranks, u, unit, detail::ShardMasterFormat(unit, optimizer), contents.Conversion));
      if (optimizer == nullptr) continue;
      amp::OptimizerStoredParameterState& state = optimizer_state[unit.Name()];
      state.Master = masters.back();
      for (std::uint32_t v = 0; v < first.optimizer.states; ++v) {
        // A state vector absent from the checkpoint (SGD's lazy momentum) stays absent.
        state.Vectors.push_back(
            first.units[u].states[v].present
                ? ReshardState(ranks, u, unit, v, optimizer->StoredState(unit.Name(), v), contents.Conversion)
                : amp::StoredStateValues{
                      .Format = StateFormat::Float32, .BlockSize = kDefaultStateBlockSize, .Codes = {}, .Scales = {}});
      }
    }
  });

  // Every rank must have read the same checkpoint (files on node-local disks can differ): the
  // blobs' own checksums, combined, compared as max and min over the ranks.
  std::array<double, 2> extremes{Fingerprint(saved_ranks), 0.0};
  extremes[1] = -extremes[0];
  group.AllReduceHost(extremes, ReduceOp::Max);
  if (extremes[0] != -extremes[1]) {
    throw ArgumentError("saved_ranks",
                        "the ranks were given different checkpoints (blob checksums differ between "
                        "ranks): every rank must load the blobs of all saved ranks, the same ones");
  }

  // The scaler validates its own state: agreed, and put back where it loaded when another
  // rank rejected it, so no rank keeps a partial load.
  if (contents.Scaler) {
    bool loaded = false;
    try {
      distributed::detail::AgreeOn(group, "FSDP::LoadShardedCheckpoint (scaler state)", [&] {
        contents.Scaler.Load(scaler_state);
        loaded = true;
      });
    } catch (...) {
      if (loaded) contents.Scaler.Load(scaler_backup);
      throw;
    }
  }

  // Everything checked on every rank: commit. A failure now would leave ranks apart.
  AbortGuard guard(group, "FSDP LoadShardedCheckpoint (commit)");
  for (std::size_t u = 0; u < UnitCount(); ++u) {
    FSDPShardingUnit& unit = Unit(u);
    unit.LoadShard(masters[u]);
    unit.ZeroGrad();
  }
  if (optimizer != nullptr) {
    optimizer->ImportStoredState(optimizer_state, saved_optimizer.steps);
    optimizer->SetLearningRate(saved_optimizer.learning_rate);
    // Stochastic rounding keys its bits by the seed too: the resumed run draws the saved run's.
    if (saved_optimizer.has_rounding_seed) optimizer->SetRoundingSeed(saved_optimizer.rounding_seed);
  }
  return step;
}

void FSDP::SaveShardedCheckpointFiles(const std::filesystem::path& directory,
                                      const ShardedCheckpointContents& contents) {
  IProcessGroup& group = ProcessGroup();
  distributed::detail::AgreeOn(group, "FSDP::SaveShardedCheckpointFiles", [&] {
    const std::vector<std::byte> blob = SaveShardedCheckpoint(contents);
    std::error_code error;
    std::filesystem::create_directories(directory, error);
    if (!std::filesystem::is_directory(directory)) {
      throw ArgumentError("directory", "cannot create checkpoint directory '" + directory.string() + "'");
    }
    WriteCheckpointFile(directory / ShardedCheckpointFileName(group.Rank()), blob);
  });
  // Every rank has written: files of ranks this world does not have belong to an older save.
  distributed::detail::AgreeOn(group, "FSDP::SaveShardedCheckpointFiles (stale files)", [&] {
    if (group.Rank() != 0) return;
    for (int rank = group.WorldSize();; ++rank) {
      std::error_code error;
      const std::filesystem::path stale = directory / ShardedCheckpointFileName(rank);
      if (!std::filesystem::exists(stale, error)) break;
      if (!std::filesystem::remove(stale, error) || error) {
        throw ArgumentError("directory", "cannot remove the stale checkpoint file '" + stale.string() + "'");
      }
    }
  });
}

std::int64_t FSDP::LoadShardedCheckpointFiles(const std::filesystem::path& directory,
                                              const ShardedCheckpointContents& contents) {
  std::vector<std::vector<std::byte>> blobs;
  distributed::detail::AgreeOn(ProcessGroup(), "FSDP::LoadShardedCheckpointFiles",
                               [&] { blobs = ReadShardedCheckpointDirectory(directory); });
  return LoadShardedCheckpoint(blobs, contents);
}

}  // namespace mlframework::distributed::fsdp
