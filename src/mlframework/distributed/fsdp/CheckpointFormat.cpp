#include "mlframework/distributed/fsdp/CheckpointFormat.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <utility>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/distributed/fsdp/ShardedCheckpoint.hpp>

#include "mlframework/core/StateBlob.hpp"

namespace mlframework::distributed::fsdp::detail {

namespace {

using mlframework::detail::BlobReader;
using mlframework::detail::BlobWriter;

// Longest unit or parameter name and most dimensions a blob may claim: anything larger is a
// corrupt length field, rejected before it sizes an allocation.
constexpr std::uint32_t kMaxName = 4096;
constexpr std::uint32_t kMaxDims = 32;
constexpr std::uint32_t kMaxOptions = 16;
constexpr std::uint32_t kMaxStates = 16;

// The optimizer kinds with a code of their own (the blobs written before other kinds could be
// stored use these codes); any other kind is stored by name under kNamedOptimizer.
struct BuiltinOptimizer {
  std::uint8_t code;
  const char* kind;
  std::uint32_t options;
  std::uint32_t states;
};
constexpr std::array<BuiltinOptimizer, 2> kBuiltinOptimizers{{{1, "SGD", 4, 1}, {2, "Adam", 5, 2}}};
constexpr std::uint8_t kNamedOptimizer = 3;

const BuiltinOptimizer* BuiltinOf(const std::string& kind) {
  for (const BuiltinOptimizer& builtin : kBuiltinOptimizers) {
    if (kind == builtin.kind) return &builtin;
  }
  return nullptr;
}

void WriteString(BlobWriter& writer, const std::string& text) {
  writer.U32(static_cast<std::uint32_t>(text.size()));
  writer.Bytes(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

std::string ReadString(BlobReader& reader, const std::string& what) {
  const std::uint32_t length = reader.U32();
  if (length > kMaxName) reader.Fail(what + " length " + std::to_string(length) + " is implausible");
  const std::span<const std::byte> bytes = reader.Bytes(length);
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// count values of @p element bytes (FP32 by default); the length is bounded by what is left, so a
// corrupt count fails as "ends early".
std::span<const std::byte> ReadValues(BlobReader& reader, std::uint64_t count, std::size_t element = sizeof(float)) {
  if (count > std::numeric_limits<std::size_t>::max() / element) {
    reader.Fail("value count " + std::to_string(count) + " is implausible");
  }
  return reader.Bytes(static_cast<std::size_t>(count) * element);
}

SavedOptimizer ReadOptimizer(BlobReader& reader, std::uint16_t version) {
  SavedOptimizer optimizer;
  const std::uint8_t code = reader.U8();
  const BuiltinOptimizer* builtin = nullptr;
  if (code == kNamedOptimizer) {
    optimizer.kind = ReadString(reader, "optimizer kind");
    if (optimizer.kind.empty() || BuiltinOf(optimizer.kind) != nullptr) {
      reader.Fail("names its optimizer kind '" + optimizer.kind + "', which needs no name or has a code of its own");
    }
  } else if (code != 0) {
    for (const BuiltinOptimizer& known : kBuiltinOptimizers) {
      if (known.code == code) builtin = &known;
    }
    if (builtin == nullptr) reader.Fail("optimizer kind " + std::to_string(code) + " is unknown");
    optimizer.kind = builtin->kind;
  }
  // No optimizer keeps no options and no vectors; a named kind keeps at most the maxima.
  const bool named = code == kNamedOptimizer;
  const std::uint32_t count = reader.U32();
  const std::uint32_t options = builtin != nullptr ? builtin->options : 0;
  if ((!named && count != options) || count > kMaxOptions) {
    reader.Fail("holds " + std::to_string(count) + " options for optimizer " + KindName(optimizer) + ", which has " +
                (named ? "at most " + std::to_string(kMaxOptions) : std::to_string(options)));
  }
  for (std::uint32_t i = 0; i < count; ++i) optimizer.options.push_back(reader.F64());
  optimizer.learning_rate = reader.F64();
  optimizer.steps = reader.Count("optimizer step count");
  optimizer.states = reader.U32();
  const std::uint32_t states = builtin != nullptr ? builtin->states : 0;
  if ((!named && optimizer.states != states) || optimizer.states > kMaxStates) {
    reader.Fail("holds " + std::to_string(optimizer.states) + " state vectors per unit for optimizer " +
                KindName(optimizer) + ", which keeps " +
                (named ? "at most " + std::to_string(kMaxStates) : std::to_string(states)));
  }
  if (version >= 6) {
    optimizer.rounding_seed = reader.U64();
    optimizer.has_rounding_seed = true;
  }
  return optimizer;
}

SavedUnit ReadUnit(BlobReader& reader, std::uint32_t states, std::uint16_t version) {
  SavedUnit unit;
  unit.name = ReadString(reader, "unit name");
  const std::string label = "unit '" + unit.name + "'";
  const std::uint8_t dtype = reader.U8();
  const bool bf16 = version >= 4 && dtype == static_cast<std::uint8_t>(DataType::BFloat16);
  if (dtype != static_cast<std::uint8_t>(DataType::Float32) && !bf16) {
    reader.Fail(label + " stores values of dtype code " + std::to_string(dtype) + ", expected Float32" +
                (version >= 4 ? " or BFloat16" : ""));
  }
  unit.numel = reader.U64();
  unit.padded = reader.U64();
  unit.first = reader.U64();
  unit.count = reader.U64();
  if (unit.numel == 0 || unit.padded < unit.numel) {
    reader.Fail(label + " has " + std::to_string(unit.numel) + " elements and padded size " +
                std::to_string(unit.padded));
  }
  if (unit.first > unit.padded || unit.count > unit.padded - unit.first) {
    reader.Fail(label + ": range [" + std::to_string(unit.first) + ", +" + std::to_string(unit.count) +
                ") lies outside its padded size " + std::to_string(unit.padded));
  }
  const std::uint32_t parameters = reader.U32();
  if (parameters == 0 || parameters > unit.numel) {
    reader.Fail(label + " claims " + std::to_string(parameters) + " parameters for " + std::to_string(unit.numel) +
                " elements");
  }
  std::uint64_t next = 0;
  for (std::uint32_t p = 0; p < parameters; ++p) {
    SavedParameter parameter;
    parameter.name = ReadString(reader, label + " parameter name");
    const std::uint32_t dims = reader.U32();
    if (dims > kMaxDims)
      reader.Fail(label + " parameter '" + parameter.name + "' has " + std::to_string(dims) + " dimensions");
    std::uint64_t size = 1;
    for (std::uint32_t d = 0; d < dims; ++d) {
      const std::uint64_t extent = reader.U64();
      if (extent != 0 && size > unit.numel / extent) {
        reader.Fail(label + " parameter '" + parameter.name + "' is larger than the unit");
      }
      size *= extent;
      parameter.shape.push_back(static_cast<std::size_t>(extent));
    }
    parameter.offset = reader.U64();
    if (parameter.offset != next || size == 0 || size > unit.numel - next) {
      reader.Fail(label + " parameter '" + parameter.name + "' at offset " + std::to_string(parameter.offset) +
                  " with " + std::to_string(size) + " elements does not follow the parameters before it (offset " +
                  std::to_string(next) + " of " + std::to_string(unit.numel) + ")");
    }
    next += size;
    unit.parameters.push_back(std::move(parameter));
  }
  if (next != unit.numel) {
    reader.Fail(label + "'s parameters hold " + std::to_string(next) + " elements, the unit " +
                std::to_string(unit.numel));
  }
  if (version >= 4) {
    const std::uint8_t format = reader.U8();
    const bool fits = bf16 ? (format == static_cast<std::uint8_t>(MasterFormat::BFloat16StochasticRounding) ||
                              format == static_cast<std::uint8_t>(MasterFormat::BFloat16Remainder))
                           : format == static_cast<std::uint8_t>(MasterFormat::Float32);
    if (!fits) {
      reader.Fail(label + " has master format " + std::to_string(format) + ", not a MasterFormat of a " +
                  (bf16 ? "BFloat16" : "Float32") + " shard");
    }
    unit.master_format = static_cast<MasterFormat>(format);
  }
  if (bf16) {
    unit.master = ReadValues(reader, unit.count, sizeof(std::uint16_t));
    if (unit.master_format == MasterFormat::BFloat16Remainder) {
      unit.remainders = ReadValues(reader, unit.count, sizeof(std::uint16_t));
    }
  } else {
    unit.master = ReadValues(reader, unit.count);
  }
  for (std::uint32_t s = 0; s < states; ++s) {
    SavedState state;
    state.present = reader.Flag(label + " optimizer state");
    if (state.present && version < 3) {
      state.codes = ReadValues(reader, unit.count);
    } else if (state.present) {
      const std::uint8_t format = reader.U8();
      if (format > static_cast<std::uint8_t>(StateFormat::Float8E4M3Block)) {
        reader.Fail(label + " optimizer state " + std::to_string(s) + " has format " + std::to_string(format) +
                    ", not a StateFormat");
      }
      state.format = static_cast<StateFormat>(format);
      state.block_size = reader.U64();
      const std::uint64_t block = state.block_size;
      if (block < 32 || block > 2048 || (block & (block - 1)) != 0) {
        reader.Fail(label + " optimizer state " + std::to_string(s) + " has block size " + std::to_string(block) +
                    "; a block is a power of two from 32 to 2048 elements");
      }
      const std::size_t element = ElementSize(StateStorageDType(state.format));
      if (unit.count > std::numeric_limits<std::size_t>::max() / element) {
        reader.Fail("value count " + std::to_string(unit.count) + " is implausible");
      }
      state.codes = reader.Bytes(static_cast<std::size_t>(unit.count) * element);
      // Before version 5 a Float16 state had no scales: plain FP16 values, which the load converts.
      state.unscaled_float16 = version < 5 && state.format == StateFormat::Float16;
      if (IsBlockScaled(state.format) && !state.unscaled_float16) {
        state.scales = ReadValues(reader, StateBlockCount(unit.count, block));
      }
    }
    unit.states.push_back(state);
  }
  return unit;
}

std::string Describe(const std::vector<double>& values) {
  std::string text = "(";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + ")";
}

// ArgumentError naming saved_ranks[index] unless its unit @p mine matches rank 0's @p first.
void CheckSameUnit(const SavedUnit& mine, const SavedUnit& first, std::size_t index) {
  const std::string where = "saved_ranks[" + std::to_string(index) + "]";
  const auto differ = [&](const std::string& what) {
    throw ArgumentError("saved_ranks", where + " " + what + ", unlike saved_ranks[0]: not blobs of one checkpoint");
  };
  if (mine.name != first.name) differ("has unit '" + mine.name + "' in place of unit '" + first.name + "'");
  if (mine.master_format != first.master_format) {
    differ("keeps the masters of unit '" + mine.name + "' as " + ToString(mine.master_format) + ", not " +
           ToString(first.master_format));
  }
  if (mine.numel != first.numel || mine.padded != first.padded || mine.parameters.size() != first.parameters.size()) {
    differ("lays out unit '" + mine.name + "' differently (elements, padded size or parameter count)");
  }
  for (std::size_t p = 0; p < mine.parameters.size(); ++p) {
    if (mine.parameters[p].name != first.parameters[p].name || mine.parameters[p].shape != first.parameters[p].shape) {
      differ("has parameter '" + mine.parameters[p].name + "' " + mlframework::ToString(mine.parameters[p].shape) +
             " of unit '" + mine.name + "' in place of '" + first.parameters[p].name + "' " +
             mlframework::ToString(first.parameters[p].shape));
    }
  }
  for (std::size_t s = 0; s < mine.states.size(); ++s) {
    const SavedState& a = mine.states[s];
    const SavedState& b = first.states[s];
    if (a.present != b.present) {
      differ(std::string(a.present ? "has" : "lacks") + " optimizer state vector " + std::to_string(s) + " of unit '" +
             mine.name + "'");
    }
    if (a.present && (a.format != b.format || (IsBlockScaled(a.format) && a.block_size != b.block_size))) {
      differ("stores optimizer state vector " + std::to_string(s) + " of unit '" + mine.name + "' as " +
             ToString(a.format) + " in blocks of " + std::to_string(a.block_size));
    }
  }
}

// ArgumentError unless the ranges of every rank together cover elements [0, numel) of unit @p u.
void CheckCovered(const std::vector<SavedRank>& ranks, std::size_t u) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  ranges.reserve(ranks.size());
  for (const SavedRank& rank : ranks) {
    ranges.emplace_back(rank.units[u].first, rank.units[u].first + rank.units[u].count);
  }
  std::sort(ranges.begin(), ranges.end());
  std::uint64_t covered = 0;
  const std::uint64_t numel = ranks.front().units[u].numel;
  for (const auto& [begin, end] : ranges) {
    if (begin > covered) break;
    covered = std::max(covered, end);
  }
  if (covered < numel) {
    throw ArgumentError("saved_ranks", "the saved ranks' ranges of unit '" + ranks.front().units[u].name +
                                           "' leave element " + std::to_string(covered) + " of " +
                                           std::to_string(numel) + " uncovered");
  }
}

}  // namespace

std::string KindName(const SavedOptimizer& saved) { return saved.kind.empty() ? "none" : saved.kind; }

void CheckStorable(const SavedOptimizer& saved) {
  if (saved.kind.size() > kMaxName) {
    throw ArgumentError("contents.Optimizer", "has a state kind name of " + std::to_string(saved.kind.size()) +
                                                  " bytes, more than " + std::to_string(kMaxName));
  }
  if (saved.options.size() > kMaxOptions || saved.states > kMaxStates) {
    throw ArgumentError("contents.Optimizer", KindName(saved) + " has " + std::to_string(saved.options.size()) +
                                                  " options and " + std::to_string(saved.states) +
                                                  " state vectors: a checkpoint holds at most " +
                                                  std::to_string(kMaxOptions) + " and " + std::to_string(kMaxStates));
  }
  const BuiltinOptimizer* builtin = BuiltinOf(saved.kind);
  if (builtin != nullptr && (saved.options.size() != builtin->options || saved.states != builtin->states)) {
    throw ArgumentError("contents.Optimizer", "calls its state kind '" + saved.kind + "' but has " +
                                                  std::to_string(saved.options.size()) + " options and " +
                                                  std::to_string(saved.states) + " state vectors, the library's " +
                                                  saved.kind + " " + std::to_string(builtin->options) + " and " +
                                                  std::to_string(builtin->states) + ": give it another name");
  }
}

std::vector<std::byte> EncodeCheckpoint(const SavedRank& saved) {
  BlobWriter writer(kCheckpointKind, kShardedCheckpointVersion);
  writer.U32(saved.world);
  writer.U32(saved.rank);
  writer.U8(saved.strategy);
  writer.I64(saved.step);
  if (saved.optimizer.kind.empty()) {
    writer.U8(0);
  } else if (const BuiltinOptimizer* builtin = BuiltinOf(saved.optimizer.kind); builtin != nullptr) {
    writer.U8(builtin->code);
  } else {
    writer.U8(kNamedOptimizer);
    WriteString(writer, saved.optimizer.kind);
  }
  writer.U32(static_cast<std::uint32_t>(saved.optimizer.options.size()));
  for (const double option : saved.optimizer.options) writer.F64(option);
  writer.F64(saved.optimizer.learning_rate);
  writer.I64(saved.optimizer.steps);
  writer.U32(saved.optimizer.states);
  writer.U64(saved.optimizer.rounding_seed);
  writer.U8(saved.has_scaler ? 1 : 0);
  writer.U64(saved.scaler.size());
  writer.Bytes(saved.scaler);
  writer.U64(saved.units.size());
  for (const SavedUnit& unit : saved.units) {
    WriteString(writer, unit.name);
    const bool bf16 = unit.master_format != MasterFormat::Float32;
    writer.U8(static_cast<std::uint8_t>(bf16 ? DataType::BFloat16 : DataType::Float32));
    writer.U64(unit.numel);
    writer.U64(unit.padded);
    writer.U64(unit.first);
    writer.U64(unit.count);
    writer.U32(static_cast<std::uint32_t>(unit.parameters.size()));
    for (const SavedParameter& parameter : unit.parameters) {
      WriteString(writer, parameter.name);
      writer.U32(static_cast<std::uint32_t>(parameter.shape.size()));
      for (const std::size_t extent : parameter.shape) writer.U64(extent);
      writer.U64(parameter.offset);
    }
    writer.U8(static_cast<std::uint8_t>(unit.master_format));
    writer.Bytes(unit.master);
    writer.Bytes(unit.remainders);
    for (const SavedState& state : unit.states) {
      writer.U8(state.present ? 1 : 0);
      if (!state.present) continue;
      writer.U8(static_cast<std::uint8_t>(state.format));
      writer.U64(state.block_size);
      writer.Bytes(state.codes);
      writer.Bytes(state.scales);
    }
  }
  return writer.Finish();
}

SavedRank DecodeCheckpoint(std::span<const std::byte> blob, const std::string& parameter) {
  std::uint16_t version = 0;
  BlobReader reader = mlframework::detail::OpenBlobVersion(blob, kCheckpointKind,
                                                           {kShardedCheckpointVersion, 5, 4, 3, 2}, version, parameter);
  SavedRank saved;
  saved.world = reader.U32();
  saved.rank = reader.U32();
  if (saved.world == 0 || saved.rank >= saved.world) {
    reader.Fail("rank " + std::to_string(saved.rank) + " of world size " + std::to_string(saved.world) +
                " is impossible");
  }
  saved.strategy = reader.U8();
  // The strategy is recorded for inspection only: a load reads the stored ranges, whatever
  // strategy cut them, so a checkpoint of one strategy loads under another.
  saved.step = reader.Count("training step");
  saved.optimizer = ReadOptimizer(reader, version);
  saved.has_scaler = reader.Flag("scaler");
  const std::uint64_t scaler_length = reader.U64();
  if (scaler_length > blob.size())
    reader.Fail("scaler state length " + std::to_string(scaler_length) + " is implausible");
  saved.scaler = reader.Bytes(static_cast<std::size_t>(scaler_length));
  if (!saved.has_scaler && !saved.scaler.empty()) reader.Fail("holds scaler bytes but no scaler");
  const std::uint64_t units = reader.U64();
  if (units == 0 || units > blob.size()) reader.Fail("unit count " + std::to_string(units) + " is implausible");
  for (std::uint64_t u = 0; u < units; ++u) {
    saved.units.push_back(ReadUnit(reader, saved.optimizer.states, version));
  }
  reader.ExpectEnd();
  return saved;
}

void CheckOneCheckpoint(const std::vector<SavedRank>& ranks) {
  if (ranks.empty()) throw ArgumentError("saved_ranks", "holds no blob: pass the blobs of every saved rank");
  const SavedRank& first = ranks.front();
  // Saved rank to its blob's index: sized by the blobs given, never by a (maybe corrupt) world size.
  std::map<std::uint32_t, std::size_t> seen;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const SavedRank& mine = ranks[i];
    const std::string where = "saved_ranks[" + std::to_string(i) + "]";
    if (mine.world != first.world) {
      throw ArgumentError("saved_ranks", where + " was saved at world size " + std::to_string(mine.world) +
                                             ", saved_ranks[0] at " + std::to_string(first.world) +
                                             ": not blobs of one checkpoint");
    }
    if (const auto it = seen.find(mine.rank); it != seen.end()) {
      throw ArgumentError("saved_ranks", where + " and saved_ranks[" + std::to_string(it->second) +
                                             "] are both saved rank " + std::to_string(mine.rank));
    }
    seen.emplace(mine.rank, i);
    const auto differ = [&](const std::string& what, const std::string& value, const std::string& first_value) {
      std::string message = where;
      message.append(" has ").append(what).append(" ").append(value).append(", saved_ranks[0] ").append(first_value);
      throw ArgumentError("saved_ranks", message.append(": not blobs of one checkpoint"));
    };
    if (mine.step != first.step) differ("training step", std::to_string(mine.step), std::to_string(first.step));
    if (mine.strategy != first.strategy) {
      differ("sharding strategy", std::to_string(mine.strategy), std::to_string(first.strategy));
    }
    const SavedOptimizer& a = mine.optimizer;
    const SavedOptimizer& b = first.optimizer;
    if (a.kind != b.kind || a.options != b.options || a.learning_rate != b.learning_rate || a.steps != b.steps ||
        a.states != b.states || a.has_rounding_seed != b.has_rounding_seed || a.rounding_seed != b.rounding_seed) {
      differ("optimizer",
             KindName(a) + Describe(a.options) + " lr " + std::to_string(a.learning_rate) + " at step " +
                 std::to_string(a.steps) + " rounding seed " + std::to_string(a.rounding_seed),
             KindName(b) + Describe(b.options) + " lr " + std::to_string(b.learning_rate) + " at step " +
                 std::to_string(b.steps) + " rounding seed " + std::to_string(b.rounding_seed));
    }
    if (mine.has_scaler != first.has_scaler ||
        !std::equal(mine.scaler.begin(), mine.scaler.end(), first.scaler.begin(), first.scaler.end())) {
      differ("scaler state", "of " + std::to_string(mine.scaler.size()) + " bytes",
             "another of " + std::to_string(first.scaler.size()) + " bytes");
    }
    if (mine.units.size() != first.units.size()) {
      differ("unit count", std::to_string(mine.units.size()), std::to_string(first.units.size()));
    }
    for (std::size_t u = 0; u < mine.units.size(); ++u) CheckSameUnit(mine.units[u], first.units[u], i);
  }
  // Distinct ranks below the world size: when fewer than the world size, one of the first
  // ranks.size() + 1 ranks is missing.
  for (std::uint32_t r = 0; r < first.world; ++r) {
    if (seen.count(r) == 0) {
      throw ArgumentError("saved_ranks", "saved rank " + std::to_string(r) + " of " + std::to_string(first.world) +
                                             " is missing (" + std::to_string(ranks.size()) +
                                             " blobs given): pass the blobs of every saved rank");
    }
  }
  for (std::size_t u = 0; u < first.units.size(); ++u) CheckCovered(ranks, u);
}

}  // namespace mlframework::distributed::fsdp::detail
