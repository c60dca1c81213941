#pragma once
// Private: the registered tensors of an FP8 scaling recipe and their scale state, one FP32 state
// tensor per device laid out as core/Float8ScaleUpdate.hpp describes. DelayedScaling and
// CurrentScaling differ only in when they update the scales; everything else lives here.

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <mlframework/core/Device.hpp>
#include <mlframework/core/Float8ScaleUpdate.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/fp8/Format.hpp>

#include "mlframework/core/StateBlob.hpp"

namespace mlframework::fp8::detail {

// The longest amax history: the state's Float8StateRows(H) rows must not wrap around a size_t.
inline constexpr std::size_t kMaxAmaxHistory = SIZE_MAX - Float8StateRows(0);

class ScaleTable {
 public:
  struct Entry {
    std::string name;
    TensorRole role = TensorRole::Forward;
    DataType dtype = DataType::Float8E4M3FN;
    std::size_t group = 0;  // index into groups_
    std::size_t slot = 0;   // column in the group's state tensor
  };

  // A run of entries quantized together: consecutive slots of one group.
  struct Run {
    std::size_t group = 0;
    std::size_t first_slot = 0;
    std::size_t begin = 0;  // index range into the caller's lists
    std::size_t end = 0;
  };

  ScaleTable(Format format, std::size_t history_length);

  Format GetFormat() const noexcept { return format_; }
  std::size_t HistoryLength() const noexcept { return history_length_; }

  void Register(const std::string& name, TensorRole role, const ITensor& like);
  bool IsRegistered(const std::string& name) const { return index_.contains(name); }
  std::vector<std::string> Names() const;
  // The entry of @p name; ArgumentError naming @p parameter when it is not registered.
  const Entry& Find(const std::string& name, const std::string& parameter = "name") const;

  // Checks a Quantize (@p quantize) or Dequantize call and returns its entries; ArgumentError
  // naming the first bad argument, before anything is written.
  std::vector<const Entry*> Check(std::span<const std::string> names, std::span<const TensorPtr> src,
                                  std::span<const TensorPtr> dst, bool quantize) const;
  // Cuts @p entries into runs of consecutive slots of one group.
  static std::vector<Run> Runs(std::span<const Entry* const> entries);

  // The one element of row @p row for @p name (ArgumentError naming `name` when not registered).
  TensorPtr View(const std::string& name, std::size_t row) const;
  // A view of @p count elements of row @p row of group @p group from slot @p slot.
  TensorPtr RowView(std::size_t group, std::size_t row, std::size_t slot, std::size_t count) const;
  std::size_t ScaleRow() const noexcept { return history_length_; }
  std::size_t ScaleInvRow() const noexcept { return history_length_ + 1; }
  std::size_t ScratchRow() const noexcept { return history_length_ + 3; }

  // The fused update of every group (@p update's HistoryLength, Count, First and Length are
  // filled in per group), or of one run's slots.
  void UpdateAll(Float8ScaleUpdate update) const;
  void UpdateRun(const Run& run, Float8ScaleUpdate update) const;
  // Folds the scratch amax of @p run's slots into their current amax.
  void FoldRun(const Run& run) const;

  // Checks and runs a Quantize: per run, with @p current (CurrentScaling) an amax pass into row 0
  // and the update of the run's scales from it first; then the scaled cast, its amax written to
  // the scratch row and folded into row 0.
  void Quantize(std::span<const std::string> names, std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                const Float8ScaleUpdate* current) const;
  // Checks and runs a Dequantize with the inverse scales.
  void Dequantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                  std::span<const TensorPtr> dst) const;

  // The amax history (row 0 first), scale and scale_inv of @p name, read to the host (waits).
  struct Column {
    std::vector<float> history;
    float scale = 1.0f;
    float scale_inv = 1.0f;
  };
  Column Read(const std::string& name) const;

  // Entries in registration order: name, role, history, scale, scale_inv.
  void WriteEntries(mlframework::detail::BlobWriter& writer) const;
  // Reads a format byte a recipe's StateDict() wrote; the reader fails naming both formats when
  // it is not this table's.
  void ReadFormat(mlframework::detail::BlobReader& reader) const;
  // Reads what WriteEntries() wrote and validates it against the registered entries and values;
  // commits nothing (ArgumentError through @p reader on any difference).
  std::map<std::string, Column> ReadEntries(mlframework::detail::BlobReader& reader) const;
  // Writes @p columns (one per registered name, from ReadEntries()) into the state tensors.
  void Commit(const std::map<std::string, Column>& columns) const;

 private:
  struct Group {
    Device device;
    const TensorBackend* backend = nullptr;
    TensorPtr state;
    std::vector<std::size_t> entries;  // entry index of each slot
    // UpdateAll()'s copy of the state (several devices only), kept so that later updates do not
    // allocate (a captured UpdateScales() must not).
    mutable TensorPtr backup;
  };

  Float8ScaleUpdate UpdateOf(const Group& group) const;

  Format format_;
  std::size_t history_length_;
  std::vector<Entry> entries_;
  std::map<std::string, std::size_t> index_;
  std::vector<Group> groups_;
};

}  // namespace mlframework::fp8::detail
