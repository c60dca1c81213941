#include "mlframework/optimizers/ParameterSet.hpp"

#include <cmath>
#include <cstddef>
#include <span>
#include <string>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

namespace mlframework::optimizers::detail {

namespace {

// An FP32 tensor whose memory the host addresses: the optimizer reads and writes it in place.
bool IsHostFloat32(const ITensor& tensor) {
  return tensor.GetDataType() == DataType::Float32 && !tensor.HostBytes().empty();
}

}  // namespace

std::span<float> Floats(ITensor& tensor) {
  const std::span<std::byte> bytes = tensor.MutableHostBytes();
  return {reinterpret_cast<float*>(bytes.data()), bytes.size() / sizeof(float)};
}

ParameterSet::ParameterSet(GradientMap parameters) : parameters_(std::move(parameters)) {
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

std::span<float> ParameterSet::Master(std::size_t i) { return Floats(*master_list_[i]); }

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
  writer.U64(list_.size());
  for (std::size_t i = 0; i < list_.size(); ++i) {
    WriteName(writer, names_[i]);
    WriteFloats(writer, Floats(*master_list_[i]));
  }
}

std::vector<std::vector<float>> ParameterSet::ReadMasters(mlframework::detail::BlobReader& reader) const {
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
  return values;
}

void ParameterSet::CommitMasters(const std::vector<std::vector<float>>& values) {
  for (std::size_t i = 0; i < list_.size(); ++i) {
    const std::span<float> master = Master(i);
    std::copy(values[i].begin(), values[i].end(), master.begin());
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
