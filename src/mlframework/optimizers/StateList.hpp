#pragma once
// Private: one optimizer state (Adam's exp_avg or exp_avg_sq, SGD's momentum) over every
// parameter, stored in its StateFormat, as the fused steps read and write it; its FP32 view, its
// blob records, and the conversions a load may ask for (amp::StateConversion).

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <mlframework/amp/IOptimizerState.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/OptimizerStep.hpp>

#include "mlframework/core/StateBlob.hpp"

namespace mlframework::optimizers::detail {

// Bytes per stored element of @p format (4, 2 or 1).
std::size_t StateElementBytes(StateFormat format) noexcept;

// True for the FP16 codes of a Float16 state without scales (@p scales of them for @p count
// elements): plain FP16 values, as blobs and sharded checkpoints stored Float16 states before the
// format was block-scaled. A load decodes them and encodes them as the scaled format.
constexpr bool IsUnscaledFloat16(StateFormat format, std::size_t scales, std::size_t count) noexcept {
  return format == StateFormat::Float16 && scales == 0 && count != 0;
}

// The FP32 values of a state stored as @p stored (Codes holds whole elements; Scales one per
// block when block-scaled, none for IsUnscaledFloat16()), decoded as the fused steps decode them.
std::vector<float> DecodeState(const amp::StoredStateVector& stored);

// A state's stored bytes and scales, owned.
struct StateRecord {
  StateFormat format = StateFormat::Float32;
  std::size_t block_size = kDefaultStateBlockSize;
  bool present = false;  // false: no such state yet (SGD's momentum before its first step)
  std::vector<std::byte> codes;
  std::vector<float> scales;
  amp::StoredStateVector View() const;
};

// Encodes @p values as @p format (blocks of @p block_size), bit for bit as the fused steps encode
// a state; @p second: the second moment (its positive values stay positive, codes unsigned).
// ArgumentError naming @p parameter, with @p what and the element, for a value the format cannot
// hold: a non-finite value, a finite one that becomes non-finite, a negative value into UInt8Block.
StateRecord EncodeState(std::span<const float> values, StateFormat format, std::size_t block_size, bool second,
                        const std::string& parameter, const std::string& what);

// The record of a state in a blob: u8 present, then when present u8 format | u64 block size |
// u64 elements | the stored bytes | u64 scale count | f32 scales.
void WriteStateRecord(mlframework::detail::BlobWriter& writer, const amp::StoredStateVector& stored, bool present);
// Reads a record of @p count elements (the reader fails naming @p what for a bad format, block
// size or length); @p unscaled_float16: a Float16 record has no scales (IsUnscaledFloat16()).
StateRecord ReadStateRecord(mlframework::detail::BlobReader& reader, std::size_t count, const std::string& what,
                            bool unscaled_float16 = false);

// How an optimizer blob of some version stores its states.
enum class BlobStates {
  Records,          // ReadStateRecord()'s records
  UnscaledFloat16,  // the records, a Float16 one without scales (IsUnscaledFloat16())
  Float32,          // the FP32 values WriteFloats() wrote
};

// The state record of a blob storing its states as @p states.
StateRecord ReadState(mlframework::detail::BlobReader& reader, BlobStates states, std::size_t count,
                      const std::string& what);

// ArgumentError naming @p parameter unless @p format fits the state (signed codes for the first
// moment and momentum, unsigned for the second) and @p block_size is a power of two from 32 to
// 2048; @p field names the option.
void CheckStateOption(StateFormat format, bool second, const char* field);
void CheckBlockSize(std::size_t block_size, const char* field);
void CheckMasterOption(MasterFormat format, const char* field);

// @p values as a Float32 vector in stored form (empty: no such vector).
amp::StoredStateValues Float32Values(const std::vector<float>& values);
// ImportState()'s FP32 vectors in ImportStoredState()'s form.
std::map<std::string, amp::OptimizerStoredParameterState> StoredForm(
    const std::map<std::string, amp::OptimizerParameterState>& state);
// @p stored as a record (no Codes: not present).
StateRecord ToRecord(const amp::StoredStateValues& stored);

class StateList {
 public:
  // Entries for @p count parameters, none made yet; @p second: a second moment.
  StateList(StateFormat format, std::size_t block_size, bool second, std::size_t count);

  StateFormat Format() const noexcept { return format_; }
  std::size_t BlockSize() const noexcept { return block_size_; }
  // Makes zero states (and scales) for the parameters @p indices of @p sizes elements, in one
  // contiguous buffer.
  void Make(const std::vector<std::size_t>& indices, const std::vector<std::size_t>& sizes);
  bool Has(std::size_t i) const noexcept { return data_[i] != nullptr; }
  const TensorPtr& Data(std::size_t i) const noexcept { return data_[i]; }
  const TensorPtr& Scales(std::size_t i) const noexcept { return scales_[i]; }
  std::span<const TensorPtr> Data() const noexcept { return data_; }
  // The scales of every entry when block-scaled, else empty (what the step lists take).
  std::span<const TensorPtr> ScaleList() const noexcept;

  // Entry i's values in FP32 (decoded into a cache unless stored as Float32), valid until the
  // next step or load; empty when not made.
  std::span<const float> Values(std::size_t i) const;
  amp::StoredStateVector Stored(std::size_t i) const;

  // Entry i of @p count elements as this list stores it, from @p record (a copy when the
  // format and block size match; decoded and encoded when @p conversion allows, else
  // ArgumentError naming `state` and @p what).
  StateRecord Prepare(const StateRecord& record, std::size_t count, amp::StateConversion conversion,
                      const std::string& what) const;
  // Entry i from FP32 @p values (empty: not made), encoded in this list's format.
  StateRecord PrepareValues(const std::vector<float>& values, const std::string& what) const;
  // Commits records from Prepare*() (one per entry).
  void Commit(const std::vector<StateRecord>& records);

 private:
  StateFormat format_;
  std::size_t block_size_;
  bool second_;
  std::vector<TensorPtr> data_;
  std::vector<TensorPtr> scales_;
  mutable std::vector<std::vector<float>> cache_;
};

}  // namespace mlframework::optimizers::detail
