#include "mlframework/optimizers/StateList.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/StateCodes.hpp"
#include "mlframework/optimizers/ParameterSet.hpp"

namespace mlframework::optimizers::detail {

namespace {

using mlframework::detail::BlockScale;

bool ValidBlockSize(std::size_t block_size) {
  return block_size >= 32 && block_size <= 2048 && (block_size & (block_size - 1)) == 0;
}

std::string Describe(StateFormat format, std::size_t block_size) {
  return IsBlockScaled(format) ? std::string(ToString(format)) + " (blocks of " + std::to_string(block_size) + ")"
                               : std::string(ToString(format));
}

}  // namespace

std::size_t StateElementBytes(StateFormat format) noexcept { return ElementSize(StateStorageDType(format)); }

amp::StoredStateVector StateRecord::View() const {
  return {.Format = format, .BlockSize = block_size, .Codes = codes, .Scales = scales};
}

std::vector<float> DecodeState(const amp::StoredStateVector& stored) {
  const std::size_t count = stored.Codes.size() / StateElementBytes(stored.Format);
  const bool unscaled = IsUnscaledFloat16(stored.Format, stored.Scales.size(), count);
  std::vector<float> values(count);
  const std::byte* in = stored.Codes.data();
  for (std::size_t i = 0; i < count; ++i) {
    // The codes are copied out: the bytes of a blob need not be aligned for their element type.
    switch (stored.Format) {
      case StateFormat::Float32:
        std::memcpy(&values[i], in + i * 4, 4);
        break;
      case StateFormat::BFloat16:
      case StateFormat::Float16: {
        std::uint16_t bits = 0;
        std::memcpy(&bits, in + i * 2, 2);
        if (stored.Format == StateFormat::BFloat16) {
          values[i] = mlframework::detail::BFloat16BitsToFloat(bits);
        } else if (unscaled) {
          values[i] = mlframework::detail::HalfBitsToFloat(bits);
        } else {
          values[i] = mlframework::detail::DecodeStateElement(StateFormat::Float16, &bits,
                                                              stored.Scales.data() + i / stored.BlockSize, 1, 0);
        }
        break;
      }
      case StateFormat::Int8Block:
      case StateFormat::UInt8Block:
      case StateFormat::Float8E4M3Block:
        values[i] = mlframework::detail::DecodeBlockCode(stored.Format, static_cast<std::uint8_t>(in[i]),
                                                         stored.Scales[i / stored.BlockSize]);
        break;
    }
  }
  return values;
}

StateRecord EncodeState(std::span<const float> values, StateFormat format, std::size_t block_size, bool second,
                        const std::string& parameter, const std::string& what) {
  const auto fail = [&](std::size_t i, const std::string& why) {
    throw ArgumentError(parameter, what + " element " + std::to_string(i) + " is " + std::to_string(values[i]) +
                                       ", which " + Describe(format, block_size) + " cannot hold: " + why);
  };
  StateRecord record{.format = format, .block_size = block_size, .present = true, .codes = {}, .scales = {}};
  const std::size_t n = values.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) fail(i, "it is not finite");
    if (format == StateFormat::UInt8Block && values[i] < 0.0f) fail(i, "its codes are unsigned");
  }
  // The codes as the fused steps write them (StateCodes.hpp), into a buffer aligned for them.
  std::vector<float> codes((n * StateElementBytes(format) + sizeof(float) - 1) / sizeof(float));
  const bool scaled = IsBlockScaled(format);
  record.scales.resize(scaled ? StateBlockCount(n, block_size) : 0);
  const std::size_t span = scaled ? block_size : std::max<std::size_t>(n, 1);  // unscaled: one span
  for (std::size_t begin = 0; begin < n; begin += span) {
    const std::size_t end = std::min(n, begin + span);
    float scale = 0.0f;
    if (scaled) {
      std::uint32_t largest = 0;
      for (std::size_t i = begin; i < end; ++i) {
        largest = std::max(largest, mlframework::detail::MagnitudeBits(values[i]));
      }
      scale = BlockScale(format, mlframework::detail::BitsAsFloat(largest));
      record.scales[begin / block_size] = scale;
    }
    for (std::size_t i = begin; i < end; ++i) {
      mlframework::detail::EncodeStateElement(format, codes.data(), i, values[i], scale, second);
    }
  }
  const auto bytes = std::as_bytes(std::span<const float>(codes)).first(n * StateElementBytes(format));
  record.codes.assign(bytes.begin(), bytes.end());
  const std::vector<float> decoded = DecodeState(record.View());
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(decoded[i])) fail(i, "it overflows the format");
  }
  return record;
}

void WriteStateRecord(mlframework::detail::BlobWriter& writer, const amp::StoredStateVector& stored, bool present) {
  writer.U8(present ? 1 : 0);
  if (!present) return;
  writer.U8(static_cast<std::uint8_t>(stored.Format));
  writer.U64(stored.BlockSize);
  writer.U64(stored.Codes.size() / StateElementBytes(stored.Format));
  writer.Bytes(stored.Codes);
  writer.U64(stored.Scales.size());
  for (const float scale : stored.Scales) writer.F32(scale);
}

StateRecord ReadStateRecord(mlframework::detail::BlobReader& reader, std::size_t count, const std::string& what,
                            bool unscaled_float16) {
  StateRecord record;
  record.present = reader.Flag(what);
  if (!record.present) return record;
  const std::uint8_t format = reader.U8();
  if (format > static_cast<std::uint8_t>(StateFormat::Float8E4M3Block)) {
    reader.Fail(what + " has format " + std::to_string(format) + ", not a StateFormat");
  }
  record.format = static_cast<StateFormat>(format);
  const std::uint64_t block_size = reader.U64();
  if (!ValidBlockSize(block_size)) {
    reader.Fail(what + " has block size " + std::to_string(block_size) +
                "; a block is a power of two from 32 to 2048 elements");
  }
  record.block_size = block_size;
  const std::uint64_t elements = reader.U64();
  if (elements != count) {
    reader.Fail(what + " hold " + std::to_string(elements) + " values, expected " + std::to_string(count));
  }
  const std::span<const std::byte> codes = reader.Bytes(count * StateElementBytes(record.format));
  record.codes.assign(codes.begin(), codes.end());
  const std::uint64_t scales = reader.U64();
  const bool scaled = IsBlockScaled(record.format) && !(unscaled_float16 && record.format == StateFormat::Float16);
  const std::size_t expected = scaled ? StateBlockCount(count, record.block_size) : 0;
  if (scales != expected) {
    reader.Fail(what + " hold " + std::to_string(scales) + " scales, expected " + std::to_string(expected));
  }
  record.scales.resize(expected);
  for (float& scale : record.scales) scale = reader.F32();
  return record;
}

StateRecord ReadState(mlframework::detail::BlobReader& reader, BlobStates states, std::size_t count,
                      const std::string& what) {
  if (states != BlobStates::Float32) {
    return ReadStateRecord(reader, count, what, states == BlobStates::UnscaledFloat16);
  }
  const std::vector<float> values = ReadFloats(reader, count, what);
  StateRecord record{.format = StateFormat::Float32, .present = true, .codes = {}, .scales = {}};
  record.codes.resize(values.size() * sizeof(float));
  std::memcpy(record.codes.data(), values.data(), record.codes.size());
  return record;
}

void CheckStateOption(StateFormat format, bool second, const char* field) {
  const auto value = static_cast<unsigned>(format);
  if (value > static_cast<unsigned>(StateFormat::Float8E4M3Block)) {
    throw ArgumentError(field, "is " + std::to_string(value) + ", not a StateFormat");
  }
  if (second ? format == StateFormat::Int8Block : format == StateFormat::UInt8Block) {
    throw ArgumentError(field, "is " + std::string(ToString(format)) + "; " +
                                   (second ? "the second moment takes UInt8Block codes"
                                           : "unsigned codes hold only the second moment"));
  }
}

void CheckBlockSize(std::size_t block_size, const char* field) {
  if (!ValidBlockSize(block_size)) {
    throw ArgumentError(field,
                        "is " + std::to_string(block_size) + "; a block is a power of two from 32 to 2048 elements");
  }
}

void CheckMasterOption(MasterFormat format, const char* field) {
  const auto value = static_cast<unsigned>(format);
  if (value > static_cast<unsigned>(MasterFormat::BFloat16Remainder)) {
    throw ArgumentError(field, "is " + std::to_string(value) + ", not a MasterFormat");
  }
}

amp::StoredStateValues Float32Values(const std::vector<float>& values) {
  amp::StoredStateValues stored{.Format = StateFormat::Float32, .Codes = {}, .Scales = {}};
  const std::span<const std::byte> bytes = std::as_bytes(std::span<const float>(values));
  stored.Codes.assign(bytes.begin(), bytes.end());
  return stored;
}

std::map<std::string, amp::OptimizerStoredParameterState> StoredForm(
    const std::map<std::string, amp::OptimizerParameterState>& state) {
  std::map<std::string, amp::OptimizerStoredParameterState> stored;
  for (const auto& [name, entry] : state) {
    amp::OptimizerStoredParameterState& out = stored[name];
    out.Master = entry.Master;
    for (const std::vector<float>& values : entry.Vectors) out.Vectors.push_back(Float32Values(values));
  }
  return stored;
}

StateRecord ToRecord(const amp::StoredStateValues& stored) {
  return {.format = stored.Format,
          .block_size = stored.BlockSize,
          .present = !stored.Codes.empty(),
          .codes = stored.Codes,
          .scales = stored.Scales};
}

StateList::StateList(StateFormat format, std::size_t block_size, bool second, std::size_t count)
    : format_(format), block_size_(block_size), second_(second), data_(count), scales_(count), cache_(count) {}

void StateList::Make(const std::vector<std::size_t>& indices, const std::vector<std::size_t>& sizes) {
  std::vector<Shape> shapes;
  std::vector<Shape> scale_shapes;
  for (const std::size_t size : sizes) {
    shapes.push_back({size});
    scale_shapes.push_back({StateBlockCount(size, block_size_)});
  }
  std::vector<TensorPtr> data = ZerosContiguous(shapes, StateStorageDType(format_), Device::CPU());
  std::vector<TensorPtr> scales;
  if (IsBlockScaled(format_)) {
    scales = ZerosContiguous(scale_shapes, DataType::Float32, Device::CPU());
  }
  for (std::size_t k = 0; k < indices.size(); ++k) {
    data_[indices[k]] = std::move(data[k]);
    if (!scales.empty()) scales_[indices[k]] = std::move(scales[k]);
  }
}

std::span<const TensorPtr> StateList::ScaleList() const noexcept {
  return IsBlockScaled(format_) ? std::span<const TensorPtr>(scales_) : std::span<const TensorPtr>();
}

amp::StoredStateVector StateList::Stored(std::size_t i) const {
  amp::StoredStateVector stored{.Format = format_, .BlockSize = block_size_, .KeepPositive = second_};
  if (!data_[i]) return stored;
  stored.Codes = data_[i]->HostBytes();
  if (scales_[i]) {
    const std::span<const std::byte> bytes = scales_[i]->HostBytes();
    stored.Scales = {reinterpret_cast<const float*>(bytes.data()), bytes.size() / sizeof(float)};
  }
  return stored;
}

std::span<const float> StateList::Values(std::size_t i) const {
  if (!data_[i]) return {};
  const amp::StoredStateVector stored = Stored(i);
  if (format_ == StateFormat::Float32) {
    return {reinterpret_cast<const float*>(stored.Codes.data()), stored.Codes.size() / sizeof(float)};
  }
  cache_[i] = DecodeState(stored);
  return cache_[i];
}

StateRecord StateList::Prepare(const StateRecord& record, std::size_t count, amp::StateConversion conversion,
                               const std::string& what) const {
  if (!record.present) return record;
  const bool unscaled = IsUnscaledFloat16(record.format, record.scales.size(), count);
  const bool same =
      !unscaled && record.format == format_ && (!IsBlockScaled(format_) || record.block_size == block_size_);
  const std::size_t scales = IsBlockScaled(record.format) && !unscaled ? StateBlockCount(count, record.block_size) : 0;
  if (record.codes.size() != count * StateElementBytes(record.format) || record.scales.size() != scales) {
    throw ArgumentError("state", what + " hold " + std::to_string(record.codes.size()) + " bytes and " +
                                     std::to_string(record.scales.size()) + " scales, " + std::to_string(count) +
                                     " elements of " + Describe(record.format, record.block_size) + " take " +
                                     std::to_string(count * StateElementBytes(record.format)) + " and " +
                                     std::to_string(scales));
  }
  if (same) {
    StateRecord copy = record;
    copy.block_size = block_size_;
    return copy;
  }
  if (conversion != amp::StateConversion::Convert && !(unscaled && format_ == StateFormat::Float16)) {
    throw ArgumentError("state", what + " are stored as " + Describe(record.format, record.block_size) +
                                     " but this optimizer keeps " + Describe(format_, block_size_) +
                                     ": load with StateConversion::Convert to convert them");
  }
  const std::vector<float> values = DecodeState(record.View());
  if (values.size() != count) {
    throw ArgumentError("state",
                        what + " hold " + std::to_string(values.size()) + " values, expected " + std::to_string(count));
  }
  return EncodeState(values, format_, block_size_, second_, "state", what);
}

StateRecord StateList::PrepareValues(const std::vector<float>& values, const std::string& what) const {
  if (values.empty())
    return StateRecord{.format = format_, .block_size = block_size_, .present = false, .codes = {}, .scales = {}};
  return EncodeState(values, format_, block_size_, second_, "state", what);
}

void StateList::Commit(const std::vector<StateRecord>& records) {
  std::vector<std::size_t> missing;
  std::vector<std::size_t> sizes;
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (records[i].present && !data_[i]) {
      missing.push_back(i);
      sizes.push_back(records[i].codes.size() / StateElementBytes(format_));
    }
  }
  Make(missing, sizes);
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (!records[i].present) {
      data_[i] = nullptr;
      scales_[i] = nullptr;
      continue;
    }
    const std::span<std::byte> data = data_[i]->MutableHostBytes();
    std::copy(records[i].codes.begin(), records[i].codes.end(), data.begin());
    if (scales_[i]) {
      const std::span<std::byte> scales = scales_[i]->MutableHostBytes();
      std::memcpy(scales.data(), records[i].scales.data(), records[i].scales.size() * sizeof(float));
    }
  }
}

}  // namespace mlframework::optimizers::detail
