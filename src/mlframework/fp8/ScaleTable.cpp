#include "mlframework/fp8/ScaleTable.hpp"

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/core/TensorBackend.hpp>

#include "mlframework/core/HostAlias.hpp"

namespace mlframework::fp8::detail {

namespace {

std::string Quoted(const std::string& name) { return "'" + name + "'"; }

std::string At(const std::string& list, std::size_t i) { return list + "[" + std::to_string(i) + "]"; }

}  // namespace

ScaleTable::ScaleTable(Format format, std::size_t history_length) : format_(format), history_length_(history_length) {
  if (format != Format::E4M3 && format != Format::HYBRID) {
    throw ArgumentError("format", "value " + std::to_string(static_cast<int>(format)) + " is not E4M3 or HYBRID");
  }
  if (history_length == 0) {
    throw ArgumentError("amax_history_len", "is 0; the amax history holds at least one step");
  }
  if (history_length > kMaxAmaxHistory) {
    throw ArgumentError("amax_history_len", std::to_string(history_length) + " is above " +
                                                std::to_string(kMaxAmaxHistory) +
                                                ": the state's rows (H + 4) would not fit a size_t");
  }
}

void ScaleTable::Register(const std::string& name, TensorRole role, const ITensor& like) {
  if (name.empty()) {
    throw ArgumentError("name", "is empty");
  }
  if (index_.contains(name)) {
    throw ArgumentError("name", Quoted(name) + " is already registered");
  }
  if (role != TensorRole::Forward && role != TensorRole::Gradient) {
    throw ArgumentError("role", "value " + std::to_string(static_cast<int>(role)) + " is not Forward or Gradient");
  }
  const Device device = like.GetDevice();
  const TensorBackend* backend = like.Backend();
  std::size_t group_index = groups_.size();
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].device == device && groups_[g].backend == backend) group_index = g;
  }
  const std::size_t old_count = group_index < groups_.size() ? groups_[group_index].entries.size() : 0;
  const std::size_t count = old_count + 1;
  const std::size_t rows = Float8StateRows(history_length_);
  const DataType dtype = fp8::Float8TypeOf(format_, role);

  // The new state: the old columns, then the new one (history 0, scale 1, scale_inv 1).
  std::vector<float> values(rows * count, 0.0f);
  if (old_count > 0) {
    const std::vector<float> old = groups_[group_index].state->ToFloatVector();
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t j = 0; j < old_count; ++j) values[r * count + j] = old[r * old_count + j];
    }
  }
  values[ScaleRow() * count + old_count] = 1.0f;
  values[ScaleInvRow() * count + old_count] = 1.0f;
  values[(history_length_ + 2) * count + old_count] = Float8Max(dtype);
  const Shape shape{rows * count};
  TensorPtr state = backend != nullptr ? backend->Allocate(shape, DataType::Float32, device)
                                       : Zeros(shape, DataType::Float32, device);
  state->CopyFromFloats(values);

  // Nothing above changed the table; commit.
  if (group_index == groups_.size()) {
    groups_.push_back(Group{device, backend, nullptr, {}, nullptr});
  }
  Group& group = groups_[group_index];
  group.state = std::move(state);
  group.entries.push_back(entries_.size());
  index_.emplace(name, entries_.size());
  entries_.push_back(Entry{name, role, dtype, group_index, old_count});
}

std::vector<std::string> ScaleTable::Names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const Entry& entry : entries_) names.push_back(entry.name);
  return names;
}

const ScaleTable::Entry& ScaleTable::Find(const std::string& name, const std::string& parameter) const {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    throw ArgumentError(parameter, Quoted(name) + " is not a registered tensor name");
  }
  return entries_[it->second];
}

std::vector<const ScaleTable::Entry*> ScaleTable::Check(std::span<const std::string> names,
                                                        std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                                                        bool quantize) const {
  if (src.size() != names.size() || dst.size() != names.size()) {
    throw ArgumentError("names", std::to_string(names.size()) + " names for " + std::to_string(src.size()) +
                                     " sources and " + std::to_string(dst.size()) + " destinations");
  }
  std::vector<const Entry*> entries;
  entries.reserve(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    const Entry& entry = Find(names[i], At("names", i));
    if (!src[i]) throw ArgumentNullError(At("src", i));
    if (!dst[i]) throw ArgumentNullError(At("dst", i));
    const ITensor& wide = quantize ? *src[i] : *dst[i];
    const ITensor& narrow = quantize ? *dst[i] : *src[i];
    const std::string wide_name = At(quantize ? "src" : "dst", i);
    const std::string narrow_name = At(quantize ? "dst" : "src", i);
    if (IsFloat8(wide.GetDataType()) || !IsValid(wide.GetDataType())) {
      throw ArgumentError(wide_name, "is " + std::string(ToString(wide.GetDataType())) + " (tensor " +
                                         Quoted(names[i]) + "); the wide side is Float32, Float16 or BFloat16");
    }
    if (narrow.GetDataType() != entry.dtype) {
      throw ArgumentError(narrow_name, "is " + std::string(ToString(narrow.GetDataType())) + "; tensor " +
                                           Quoted(names[i]) + " (" + std::string(ToString(entry.role)) + " under " +
                                           std::string(ToString(format_)) + ") is quantized into " +
                                           std::string(ToString(entry.dtype)));
    }
    // The FP8 kernels take pairs of one shape (equal sizes are not enough).
    if (src[i]->GetShape() != dst[i]->GetShape()) {
      throw ArgumentError(At("dst", i), "has shape " + mlframework::ToString(dst[i]->GetShape()) + ", src[" +
                                            std::to_string(i) + "] has " + mlframework::ToString(src[i]->GetShape()));
    }
    const Device device = groups_[entry.group].device;
    const TensorBackend* state_backend = groups_[entry.group].state->Backend();
    for (const auto& [tensor, label] : {std::pair{&src[i], At("src", i)}, std::pair{&dst[i], At("dst", i)}}) {
      if ((*tensor)->GetDevice() != device) {
        throw ArgumentError(label, "is on " + (*tensor)->GetDevice().ToString() + "; the state of " + Quoted(names[i]) +
                                       " is on " + device.ToString());
      }
      // The kernels take a tensor only on the state's backend (OnABackend(): one without a backend
      // through its host elements, on the CPU backend). A list is cast run by run, so a tensor
      // they would refuse must fail the call here, before an earlier run casts, records its amax
      // or rescales.
      const TensorBackend* backend = mlframework::detail::OnABackend(*tensor, label)->Backend();
      if (backend != state_backend) {
        throw ArgumentError(label, "(tensor " + Quoted(names[i]) + ") is on backend '" + std::string(backend->Name()) +
                                       "'; the state of " + Quoted(names[i]) + " is on backend '" +
                                       std::string(state_backend->Name()) + "'");
      }
    }
    entries.push_back(&entry);
  }
  return entries;
}

std::vector<ScaleTable::Run> ScaleTable::Runs(std::span<const Entry* const> entries) {
  std::vector<Run> runs;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (!runs.empty() && runs.back().group == entries[i]->group &&
        runs.back().first_slot + (i - runs.back().begin) == entries[i]->slot) {
      runs.back().end = i + 1;
    } else {
      runs.push_back(Run{entries[i]->group, entries[i]->slot, i, i + 1});
    }
  }
  return runs;
}

TensorPtr ScaleTable::RowView(std::size_t group, std::size_t row, std::size_t slot, std::size_t count) const {
  const Group& g = groups_[group];
  return g.state->Backend()->View(g.state, row * g.entries.size() + slot, Shape{count});
}

TensorPtr ScaleTable::View(const std::string& name, std::size_t row) const {
  const Entry& entry = Find(name);
  return RowView(entry.group, row, entry.slot, 1);
}

Float8ScaleUpdate ScaleTable::UpdateOf(const Group& group) const {
  Float8ScaleUpdate update;
  update.HistoryLength = history_length_;
  update.Count = group.entries.size();
  update.First = 0;
  update.Length = group.entries.size();
  return update;
}

void ScaleTable::UpdateAll(Float8ScaleUpdate update) const {
  // One call per device. So that a failing call on a later device leaves every device as it was,
  // the states of the devices updated before the last one are copied first (on their device,
  // without waiting for it, into a buffer kept for the next update) and written back if a later
  // call throws.
  for (std::size_t g = 0; g + 1 < groups_.size(); ++g) {
    const Group& group = groups_[g];
    if (!group.backup || group.backup->Size() != group.state->Size()) {
      group.backup = group.state->Backend()->Allocate(group.state->GetShape(), DataType::Float32, group.device);
    }
    CopyInto(std::span(&group.state, 1), std::span(&group.backup, 1));
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const Group& group = groups_[g];
    const Float8ScaleUpdate layout = UpdateOf(group);
    update.HistoryLength = layout.HistoryLength;
    update.Count = layout.Count;
    update.First = 0;
    update.Length = layout.Length;
    try {
      group.state->Backend()->UpdateFloat8Scales(*group.state, update);
    } catch (...) {
      for (std::size_t k = 0; k < g; ++k) CopyInto(std::span(&groups_[k].backup, 1), std::span(&groups_[k].state, 1));
      throw;
    }
  }
}

void ScaleTable::UpdateRun(const Run& run, Float8ScaleUpdate update) const {
  const Group& group = groups_[run.group];
  const Float8ScaleUpdate layout = UpdateOf(group);
  update.HistoryLength = layout.HistoryLength;
  update.Count = layout.Count;
  update.First = run.first_slot;
  update.Length = run.end - run.begin;
  group.state->Backend()->UpdateFloat8Scales(*group.state, update);
}

void ScaleTable::FoldRun(const Run& run) const {
  const Group& group = groups_[run.group];
  Float8ScaleUpdate update = UpdateOf(group);
  update.First = run.first_slot;
  update.Length = run.end - run.begin;
  group.state->Backend()->FoldFloat8Amax(*group.state, update);
}

ScaleTable::Column ScaleTable::Read(const std::string& name) const {
  const Entry& entry = Find(name);
  const Group& group = groups_[entry.group];
  const std::vector<float> values = group.state->ToFloatVector();
  const std::size_t n = group.entries.size();
  Column column;
  for (std::size_t r = 0; r < history_length_; ++r) column.history.push_back(values[r * n + entry.slot]);
  column.scale = values[ScaleRow() * n + entry.slot];
  column.scale_inv = values[ScaleInvRow() * n + entry.slot];
  return column;
}

void ScaleTable::WriteEntries(mlframework::detail::BlobWriter& writer) const {
  std::vector<std::vector<float>> states;
  states.reserve(groups_.size());
  for (const Group& group : groups_) states.push_back(group.state->ToFloatVector());
  writer.U64(entries_.size());
  for (const Entry& entry : entries_) {
    const std::size_t n = groups_[entry.group].entries.size();
    const std::vector<float>& values = states[entry.group];
    writer.U32(static_cast<std::uint32_t>(entry.name.size()));
    writer.Bytes(std::as_bytes(std::span(entry.name.data(), entry.name.size())));
    writer.U8(static_cast<std::uint8_t>(entry.role));
    for (std::size_t r = 0; r < history_length_; ++r) writer.F32(values[r * n + entry.slot]);
    writer.F32(values[ScaleRow() * n + entry.slot]);
    writer.F32(values[ScaleInvRow() * n + entry.slot]);
  }
}

std::map<std::string, ScaleTable::Column> ScaleTable::ReadEntries(mlframework::detail::BlobReader& reader) const {
  const std::uint64_t count = reader.U64();
  if (count != entries_.size()) {
    reader.Fail("holds " + std::to_string(count) + " tensors; this recipe has " + std::to_string(entries_.size()) +
                " registered");
  }
  std::map<std::string, Column> columns;
  for (std::uint64_t k = 0; k < count; ++k) {
    const std::uint32_t length = reader.U32();
    const std::span<const std::byte> bytes = reader.Bytes(length);
    const std::string name(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    const auto it = index_.find(name);
    if (it == index_.end()) {
      reader.Fail("holds tensor " + Quoted(name) + ", which is not registered in this recipe");
    }
    if (columns.contains(name)) {
      reader.Fail("holds tensor " + Quoted(name) + " twice");
    }
    const Entry& entry = entries_[it->second];
    const std::uint8_t role = reader.U8();
    if (role != static_cast<std::uint8_t>(entry.role)) {
      const std::string stored = role <= 1 ? std::string(ToString(static_cast<TensorRole>(role)))
                                           : "an unknown role (" + std::to_string(role) + ")";
      reader.Fail("tensor " + Quoted(name) + " is " + stored + " in the blob and " + std::string(ToString(entry.role)) +
                  " here");
    }
    Column column;
    for (std::size_t r = 0; r < history_length_; ++r) {
      const float amax = reader.F32();
      // NaN and +Inf are amaxes a step can record; a negative value or -Inf is not.
      if (amax < 0.0f) {
        reader.Fail("amax history entry " + std::to_string(r) + " of " + Quoted(name) + " is negative (" +
                    std::to_string(amax) + ")");
      }
      column.history.push_back(amax);
    }
    column.scale = reader.F32();
    column.scale_inv = reader.F32();
    if (!std::isfinite(column.scale) || !(column.scale > 0.0f)) {
      reader.Fail("scale of " + Quoted(name) + " (" + std::to_string(column.scale) + ") is not finite and positive");
    }
    // The update keeps every scale in [FLT_MIN, FLT_MAX], where 1 / scale is finite; a subnormal
    // scale's inverse is Inf, and every decode with it would be Inf or NaN.
    if (column.scale < FLT_MIN) {
      reader.Fail("scale of " + Quoted(name) + " (" + std::to_string(column.scale) +
                  ") is below FLT_MIN: its inverse is not finite");
    }
    if (std::bit_cast<std::uint32_t>(column.scale_inv) != std::bit_cast<std::uint32_t>(1.0f / column.scale)) {
      reader.Fail("scale_inv of " + Quoted(name) + " (" + std::to_string(column.scale_inv) + ") is not 1 / scale");
    }
    columns.emplace(name, std::move(column));
  }
  return columns;
}

void ScaleTable::Commit(const std::map<std::string, Column>& columns) const {
  const std::size_t rows = Float8StateRows(history_length_);
  std::vector<std::vector<float>> old_values;
  old_values.reserve(groups_.size());
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const Group& group = groups_[g];
    const std::size_t n = group.entries.size();
    old_values.push_back(group.state->ToFloatVector());
    std::vector<float> values = old_values.back();
    for (std::size_t j = 0; j < n; ++j) {
      const Column& column = columns.at(entries_[group.entries[j]].name);
      for (std::size_t r = 0; r < history_length_; ++r) values[r * n + j] = column.history[r];
      values[ScaleRow() * n + j] = column.scale;
      values[ScaleInvRow() * n + j] = column.scale_inv;
      values[(rows - 1) * n + j] = 0.0f;  // scratch
    }
    try {
      group.state->CopyFromFloats(values);
    } catch (...) {
      // A failing write on a later device: the devices written before get their state back.
      for (std::size_t k = 0; k < g; ++k) groups_[k].state->CopyFromFloats(old_values[k]);
      throw;
    }
  }
}

void ScaleTable::ReadFormat(mlframework::detail::BlobReader& reader) const {
  const std::uint8_t format = reader.U8();
  if (format != static_cast<std::uint8_t>(format_)) {
    reader.Fail("format " + std::string(ToString(static_cast<Format>(format))) + " differs from this recipe's " +
                std::string(ToString(format_)));
  }
}

}  // namespace mlframework::fp8::detail
