#include "mlframework/optimizers/ParameterSet.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/MemoryOverlap.hpp"
#include "mlframework/core/StateCodes.hpp"

namespace mlframework::optimizers::detail {

namespace {

// An FP32 tensor whose memory the host addresses: the optimizer reads and writes it in place.
bool IsHostFloat32(const ITensor& tensor) {
  return tensor.GetDataType() == DataType::Float32 && !tensor.HostBytes().empty();
}

// ArgumentError naming both entries when two tensors of @p tensors (not null) share memory: a
// tied weight passed under two names would be updated twice a step, and one gradient tensor under
// two names unscaled twice by a scaler (in place, once per entry). Every entry counts as written.
// SetGradients() runs it every step (FindSharedMemory() sorts, in O(n log n)).
void RequireNoSharedMemory(const GradientMap& tensors, const std::string& what) {
  const auto entry = [&](const std::string& name) { return what + "[\"" + name + "\"]"; };
  std::vector<mlframework::detail::MemoryUse> uses;
  std::vector<const std::string*> names;
  uses.reserve(tensors.size());
  names.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    uses.push_back(mlframework::detail::MemoryUse::Of(*tensor, true));
    names.push_back(&name);
  }
  const auto shared = mlframework::detail::FindSharedMemory(uses);
  if (!shared) {
    return;
  }
  const std::string& later = *names[shared->Later];
  const std::string& earlier = *names[shared->Earlier];
  if (shared->Same) {
    // Without host memory the two entries are one tensor object.
    const bool device = uses[shared->Later].IsObject();
    throw ArgumentError(entry(later), std::string(device ? "is the same tensor as " : "is the same memory as ") +
                                          entry(earlier) + ": pass a tensor shared by two names (a tied weight) once");
  }
  throw ArgumentError(entry(later),
                      "overlaps the memory of " + entry(earlier) + ": each entry needs memory of its own");
}

}  // namespace

std::span<float> Floats(ITensor& tensor) {
  const std::span<std::byte> bytes = tensor.MutableHostBytes();
  return {reinterpret_cast<float*>(bytes.data()), bytes.size() / sizeof(float)};
}

std::span<std::uint16_t> Halves(ITensor& tensor) {
  const std::span<std::byte> bytes = tensor.MutableHostBytes();
  return {reinterpret_cast<std::uint16_t*>(bytes.data()), bytes.size() / sizeof(std::uint16_t)};
}

ParameterSet::ParameterSet(GradientMap parameters, MasterFormat masters)
    : master_format_(masters), parameters_(std::move(parameters)) {
  if (parameters_.empty()) {
    throw ArgumentError("parameters", "must hold at least one tensor, got an empty map");
  }
  for (const auto& [name, tensor] : parameters_) {
    if (!tensor) {
      throw ArgumentNullError("parameters[\"" + name + "\"]");
    }
    if (!IsValid(tensor->GetDataType())) {
      throw ArgumentError("parameters[\"" + name + "\"]", "has an invalid dtype");
    }
    if (masters != MasterFormat::Float32 &&
        (tensor->GetDataType() != DataType::BFloat16 || tensor->HostBytes().empty())) {
      throw ArgumentError("parameters[\"" + name + "\"]",
                          "is a " + std::string(ToString(tensor->GetDataType())) +
                              (tensor->HostBytes().empty() ? " tensor outside host memory" : " tensor") +
                              " but the masters are " + ToString(masters) +
                              ", which updates BF16 parameters in host memory (use MasterFormat::Float32)");
    }
  }
  RequireNoSharedMemory(parameters_, "parameters");
  if (masters != MasterFormat::Float32) {
    // The BF16 parameters are the masters: updated in place, nothing to write back.
    std::vector<Shape> shapes;
    for (const auto& [name, tensor] : parameters_) {
      names_.push_back(name);
      list_.push_back(tensor);
      in_place_.push_back(true);
      master_list_.push_back(tensor);
      masters_.emplace(name, tensor);
      shapes.push_back({tensor->Size()});
    }
    if (masters == MasterFormat::BFloat16Remainder) {
      remainders_ = ZerosContiguous(shapes, DataType::BFloat16, Device::CPU());  // master = parameter
    }
    scratch_.resize(list_.size());
    return;
  }
  // FP32 parameters in host memory are their own master (no extra copy); everything else
  // (FP16/BF16, or tensors whose memory the host cannot address) gets an FP32 host master. The masters share one
  // contiguous buffer, so the optimizer's fused passes over them stream like one flat tensor.
  std::vector<TensorPtr> to_copy_src;
  std::vector<Shape> master_shapes;
  for (const auto& [name, tensor] : parameters_) {
    names_.push_back(name);
    list_.push_back(tensor);
    const bool in_place = IsHostFloat32(*tensor);
    in_place_.push_back(in_place);
    if (!in_place) {
      to_copy_src.push_back(tensor);
      master_shapes.push_back(tensor->GetShape());
    }
  }
  const std::vector<TensorPtr> to_copy_dst = ZerosContiguous(master_shapes, DataType::Float32, Device::CPU());
  std::size_t next_master = 0;
  for (std::size_t i = 0; i < list_.size(); ++i) {
    const TensorPtr& master = in_place_[i] ? list_[i] : to_copy_dst[next_master++];
    master_list_.push_back(master);
    masters_.emplace(names_[i], master);
  }
  if (!to_copy_src.empty()) {
    CastInto(to_copy_src, to_copy_dst);
  }
  scratch_.resize(list_.size());
}

TensorPtr ParameterSet::FusedCopy(std::size_t i) const noexcept {
  const DataType dtype = list_[i]->GetDataType();
  if (in_place_[i] || (dtype != DataType::Float16 && dtype != DataType::BFloat16) || list_[i]->HostBytes().empty()) {
    return nullptr;
  }
  return list_[i];
}

std::vector<TensorPtr> ParameterSet::FusedCopies() const {
  std::vector<TensorPtr> copies;
  if (master_format_ != MasterFormat::Float32) return copies;
  for (std::size_t i = 0; i < list_.size(); ++i) copies.push_back(FusedCopy(i));
  return copies;
}

void ParameterSet::SetGradients(const GradientMap& gradients) {
  for (const auto& [name, tensor] : gradients) {
    const auto it = parameters_.find(name);
    if (it == parameters_.end()) {
      throw ArgumentError("gradients", "has \"" + name + "\", which is not a parameter of this optimizer");
    }
    if (!tensor) {
      throw ArgumentNullError("gradients[\"" + name + "\"]");
    }
    if (tensor->GetShape() != it->second->GetShape()) {
      throw ArgumentError("gradients[\"" + name + "\"]", "has shape " + ToString(tensor->GetShape()) +
                                                             " but the parameter has shape " +
                                                             ToString(it->second->GetShape()));
    }
  }
  for (const auto& [name, tensor] : parameters_) {
    if (gradients.find(name) == gradients.end()) {
      throw ArgumentError("gradients", "has no gradient for parameter \"" + name + "\"");
    }
  }
  RequireNoSharedMemory(gradients, "gradients");
  std::vector<TensorPtr> list = TensorList(gradients);
  gradients_ = gradients;
  gradient_list_ = std::move(list);
}

void ParameterSet::RequireGradients(const char* optimizer) const {
  if (gradient_list_.empty()) {
    throw InvalidOperationError(std::string(optimizer) +
                                "::Step() called before any gradients were set: call SetGradients() first");
  }
}

std::vector<float> ParameterSet::MasterValues(std::size_t i) const {
  if (master_format_ == MasterFormat::Float32) {
    const std::span<const float> values = Floats(*master_list_[i]);
    return {values.begin(), values.end()};
  }
  const std::span<const std::uint16_t> params = Halves(*list_[i]);
  const std::span<const std::uint16_t> remainders =
      remainders_.empty() ? std::span<const std::uint16_t>() : Halves(*remainders_[i]);
  std::vector<float> values(params.size());
  for (std::size_t k = 0; k < params.size(); ++k) {
    values[k] = remainders.empty() ? mlframework::detail::BFloat16BitsToFloat(params[k])
                                   : mlframework::detail::MasterFromRemainder(params[k], remainders[k]);
  }
  return values;
}

std::vector<TensorPtr> ParameterSet::Float32Gradients() {
  std::vector<TensorPtr> gradients(list_.size());
  AllocateScratch();
  std::vector<TensorPtr> src;
  std::vector<TensorPtr> dst;
  for (std::size_t i = 0; i < gradient_list_.size(); ++i) {
    const TensorPtr& gradient = gradient_list_[i];
    if (IsHostFloat32(*gradient)) {
      gradients[i] = gradient;
      continue;
    }
    src.push_back(gradient);
    dst.push_back(scratch_[i]);
    gradients[i] = scratch_[i];
  }
  if (!src.empty()) {
    CastInto(src, dst);  // one fused pass for every gradient that is not FP32 host memory
  }
  return gradients;
}

void ParameterSet::AllocateScratch() {
  std::vector<std::size_t> missing;
  std::vector<Shape> shapes;
  for (std::size_t i = 0; i < gradient_list_.size(); ++i) {
    if (!scratch_[i] && !IsHostFloat32(*gradient_list_[i])) {
      missing.push_back(i);
      shapes.push_back(gradient_list_[i]->GetShape());
    }
  }
  std::vector<TensorPtr> made = ZerosContiguous(shapes, DataType::Float32, Device::CPU());
  for (std::size_t k = 0; k < missing.size(); ++k) {
    scratch_[missing[k]] = std::move(made[k]);
  }
}

void ParameterSet::WriteBack() {
  std::vector<TensorPtr> src;
  std::vector<TensorPtr> dst;
  for (std::size_t i = 0; i < list_.size(); ++i) {
    if (!in_place_[i]) {
      src.push_back(master_list_[i]);
      dst.push_back(list_[i]);
    }
  }
  if (!src.empty()) {
    CastInto(src, dst);
  }
}

void ParameterSet::WriteBackUnfused() {
  std::vector<TensorPtr> src;
  std::vector<TensorPtr> dst;
  for (std::size_t i = 0; i < list_.size(); ++i) {
    if (!in_place_[i] && FusedCopy(i) == nullptr) {
      src.push_back(master_list_[i]);
      dst.push_back(list_[i]);
    }
  }
  if (!src.empty()) {
    CastInto(src, dst);
  }
}

void ParameterSet::SaveMasters(mlframework::detail::BlobWriter& writer) const {
  writer.U8(static_cast<std::uint8_t>(master_format_));
  writer.U64(list_.size());
  for (std::size_t i = 0; i < list_.size(); ++i) {
    WriteName(writer, names_[i]);
    WriteFloats(writer, MasterValues(i));
  }
}

std::vector<std::vector<float>> ParameterSet::ReadMasters(mlframework::detail::BlobReader& reader, bool with_format,
                                                          bool convert) const {
  const std::uint8_t format = with_format ? reader.U8() : std::uint8_t{0};
  if (format > static_cast<std::uint8_t>(MasterFormat::BFloat16Remainder)) {
    reader.Fail("has master format " + std::to_string(format) + ", not a MasterFormat");
  }
  const auto saved = static_cast<MasterFormat>(format);
  if (saved != master_format_ && !convert) {
    reader.Fail("holds " + std::string(ToString(saved)) + " masters but this optimizer keeps " +
                ToString(master_format_) + " masters: load with StateConversion::Convert to convert them");
  }
  const std::uint64_t count = reader.U64();
  if (count != list_.size()) {
    reader.Fail("holds " + std::to_string(count) + " parameters but this optimizer has " +
                std::to_string(list_.size()));
  }
  std::vector<std::vector<float>> values;
  values.reserve(list_.size());
  for (std::size_t i = 0; i < list_.size(); ++i) {
    const std::string name = ReadName(reader);
    if (name != names_[i]) {
      reader.Fail("parameter " + std::to_string(i) + " is \"" + name + "\" but this optimizer has \"" + names_[i] +
                  "\"");
    }
    values.push_back(ReadFloats(reader, list_[i]->Size(), "master weights of \"" + name + "\""));
  }
  CheckMasters(values);
  return values;
}

void ParameterSet::CheckMasters(const std::vector<std::vector<float>>& values) const {
  if (master_format_ == MasterFormat::Float32) return;
  for (std::size_t i = 0; i < values.size(); ++i) {
    for (std::size_t k = 0; k < values[i].size(); ++k) {
      const float value = values[i][k];
      if (std::isfinite(value) &&
          !std::isfinite(mlframework::detail::BFloat16BitsToFloat(mlframework::detail::FloatToBFloat16Bits(value)))) {
        throw ArgumentError("state", "master weight " + std::to_string(k) + " of \"" + names_[i] + "\" is " +
                                         std::to_string(value) + ", which overflows the BF16 masters (" +
                                         ToString(master_format_) + ")");
      }
    }
  }
}

void ParameterSet::CommitMasters(const std::vector<std::vector<float>>& values) {
  for (std::size_t i = 0; i < list_.size(); ++i) {
    if (master_format_ == MasterFormat::Float32) {
      const std::span<float> master = Floats(*master_list_[i]);
      std::copy(values[i].begin(), values[i].end(), master.begin());
      continue;
    }
    const std::span<std::uint16_t> params = Halves(*list_[i]);
    const std::span<std::uint16_t> remainders =
        remainders_.empty() ? std::span<std::uint16_t>() : Halves(*remainders_[i]);
    for (std::size_t k = 0; k < params.size(); ++k) {
      if (!remainders.empty()) {
        mlframework::detail::SplitMaster(values[i][k], &params[k], &remainders[k]);
      } else {
        params[k] = mlframework::detail::FloatToBFloat16Bits(values[i][k]);
      }
    }
  }
  WriteBack();
}

std::size_t ParameterSet::IndexOf(const std::string& name, const std::string& parameter) const {
  for (std::size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) {
      return i;
    }
  }
  throw ArgumentError(parameter, "\"" + name + "\" is not a parameter of this optimizer");
}

void ParameterSet::SetElementOffsets(const std::map<std::string, std::uint64_t>& offsets) {
  std::vector<std::uint64_t> next(Count(), 0);
  for (const auto& [name, offset] : offsets) {
    const std::size_t i = IndexOf(name, "offsets");
    if (offset > std::numeric_limits<std::uint64_t>::max() - Size(i)) {
      throw ArgumentError("offsets", "gives \"" + name + "\" offset " + std::to_string(offset) + "; plus its " +
                                         std::to_string(Size(i)) + " elements it exceeds 2^64 - 1");
    }
    next[i] = offset;
  }
  element_offsets_ = std::move(next);
}

void ParameterSet::RequireSameNames(std::size_t count, const std::function<bool(const std::string&)>& has,
                                    const std::string& parameter) const {
  for (const std::string& name : names_) {
    if (!has(name)) {
      throw ArgumentError(parameter, "has no state for parameter \"" + name + "\"");
    }
  }
  if (count != names_.size()) {
    throw ArgumentError(parameter, "holds " + std::to_string(count) + " parameters but this optimizer has " +
                                       std::to_string(names_.size()));
  }
}

std::vector<std::vector<float>> ParameterSet::CheckedMasters(
    const std::map<std::string, amp::OptimizerStoredParameterState>& state, std::int64_t steps, std::size_t vectors,
    const char* optimizer) const {
  if (steps < 0) {
    throw ArgumentError("steps", "must be >= 0, got " + std::to_string(steps));
  }
  RequireSameNames(
      state.size(), [&](const std::string& name) { return state.count(name) != 0; }, "state");
  std::vector<std::vector<float>> masters;
  for (std::size_t t = 0; t < names_.size(); ++t) {
    const amp::OptimizerStoredParameterState& entry = state.at(names_[t]);
    if (entry.Vectors.size() != vectors) {
      throw ArgumentError("state", "parameter '" + names_[t] + "' has " + std::to_string(entry.Vectors.size()) +
                                       " state vectors, " + optimizer + " keeps " + std::to_string(vectors));
    }
    RequireLength(entry.Master.size(), t, "master weights", "state");
    masters.push_back(entry.Master);
  }
  CheckMasters(masters);
  return masters;
}

void ParameterSet::RequireLength(std::size_t length, std::size_t i, const std::string& what,
                                 const std::string& parameter) const {
  if (length != list_[i]->Size()) {
    throw ArgumentError(parameter, "holds " + std::to_string(length) + " " + what + " for \"" + names_[i] +
                                       "\", which has " + std::to_string(list_[i]->Size()) + " elements");
  }
}

void WriteName(mlframework::detail::BlobWriter& writer, const std::string& name) {
  writer.U32(static_cast<std::uint32_t>(name.size()));
  writer.Bytes(std::as_bytes(std::span<const char>(name.data(), name.size())));
}

std::string ReadName(mlframework::detail::BlobReader& reader) {
  const std::uint32_t length = reader.U32();
  const std::span<const std::byte> bytes = reader.Bytes(length);
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

void WriteFloats(mlframework::detail::BlobWriter& writer, std::span<const float> values) {
  writer.U64(values.size());
  for (const float v : values) {
    writer.F32(v);
  }
}

std::vector<float> ReadFloats(mlframework::detail::BlobReader& reader, std::size_t expected, const std::string& what) {
  const std::uint64_t count = reader.U64();
  if (count != expected) {
    reader.Fail(what + " hold " + std::to_string(count) + " values, expected " + std::to_string(expected));
  }
  std::vector<float> values(expected);
  for (float& v : values) {
    v = reader.F32();
  }
  return values;
}

void RequireFraction(double value, const char* parameter) {
  if (!(value >= 0.0 && value < 1.0)) {
    throw ArgumentError(parameter, "must be in [0, 1), got " + Show(value));
  }
}

}  // namespace mlframework::optimizers::detail
