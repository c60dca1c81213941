#include "Tensors.hpp"

#include <cstring>
#include <memory>
#include <string_view>
#include <utility>

#include <mlframework/core/DLPack.hpp>
#include <mlframework/core/Error.hpp>

namespace mlframework::c_api {

namespace {

// FromDLPack names the fields of its managed tensor; the caller knows them by its argument.
constexpr std::string_view kFieldPrefix = "managed->dl_tensor.";

[[noreturn]] void Rename(const ArgumentError& error, const std::string& name) {
  std::string parameter = error.Parameter();
  if (parameter.starts_with(kFieldPrefix)) {
    parameter = name + "->" + parameter.substr(kFieldPrefix.size());
  }
  ThrowRenamed(error, parameter);
}

void DeleteBorrowed(DLManagedTensor* managed) {
  delete managed;  // NOLINT(cppcoreguidelines-owning-memory): allocated by Borrow()
}

}  // namespace

void ThrowRenamed(const ArgumentError& error, const std::string& parameter) {
  if (dynamic_cast<const ArgumentNullError*>(&error) != nullptr) {
    throw ArgumentNullError(parameter);
  }
  // what() is "invalid argument '<parameter>': <message>"
  const std::string what = error.what();
  const std::string head = "invalid argument '" + error.Parameter() + "': ";
  throw ArgumentError(parameter, what.starts_with(head) ? what.substr(head.size()) : what);
}

// Appended piecewise: GCC 12 misreads "[" + std::to_string(i) as an overlapping copy.
std::string Indexed(const char* name, std::size_t index) {
  std::string result = name;
  result += '[';
  result += std::to_string(index);
  result += ']';
  return result;
}

namespace {

// Borrow() through @p import (FromDLPack, or FromDLPackAsFloat8 for FP8 bytes).
template <class Import>
TensorPtr BorrowWith(const DLTensor* tensor, const std::string& name, Import&& import) {
  if (tensor == nullptr) {
    throw ArgumentNullError(name);
  }
  // A managed tensor whose deleter frees only this wrapper: the memory stays the caller's.
  auto managed = std::make_unique<DLManagedTensor>();
  managed->dl_tensor = *tensor;
  managed->deleter = &DeleteBorrowed;
  TensorPtr result;
  try {
    result = import(managed.get());
  } catch (const ArgumentError& error) {
    Rename(error, name);
  }
  managed.release();  // NOLINT(bugprone-unused-return-value): owned by the tensor from here on
  return result;
}

template <class Import>
std::vector<TensorPtr> BorrowListWith(const DLTensor* const* tensors, std::size_t count, const char* name,
                                      Import&& import) {
  if (count > 0 && tensors == nullptr) {
    throw ArgumentNullError(name);
  }
  std::vector<TensorPtr> list;
  list.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    list.push_back(BorrowWith(tensors[i], Indexed(name, i), import));
  }
  return list;
}

}  // namespace

TensorPtr Borrow(const DLTensor* tensor, const std::string& name) {
  return BorrowWith(tensor, name, [](DLManagedTensor* managed) { return FromDLPack(managed); });
}

std::vector<TensorPtr> BorrowList(const DLTensor* const* tensors, std::size_t count, const char* name) {
  return BorrowListWith(tensors, count, name, [](DLManagedTensor* managed) { return FromDLPack(managed); });
}

TensorPtr BorrowFloat8(const DLTensor* tensor, DataType float8, const std::string& name) {
  return BorrowWith(tensor, name, [float8](DLManagedTensor* managed) { return FromDLPackAsFloat8(managed, float8); });
}

std::vector<TensorPtr> BorrowFloat8List(const DLTensor* const* tensors, std::size_t count, DataType float8,
                                        const char* name) {
  return BorrowListWith(tensors, count, name,
                        [float8](DLManagedTensor* managed) { return FromDLPackAsFloat8(managed, float8); });
}

Device DeviceOf(std::span<const TensorPtr> tensors) {
  return tensors.empty() ? Device::CPU() : tensors.front()->GetDevice();
}

bool NamedTensors::Key::operator==(const Key& other) const {
  return name == other.name && data == other.data && byte_offset == other.byte_offset &&
         device.device_type == other.device.device_type && device.device_id == other.device.device_id &&
         dtype.code == other.dtype.code && dtype.bits == other.dtype.bits && dtype.lanes == other.dtype.lanes &&
         ndim == other.ndim && shape == other.shape && strides == other.strides;
}

NamedTensors::Key NamedTensors::KeyOf(const char* name, const DLTensor& tensor) {
  Key key{.name = name,
          .data = tensor.data,
          .byte_offset = tensor.byte_offset,
          .device = tensor.device,
          .dtype = tensor.dtype,
          .ndim = tensor.ndim,
          .shape = {},
          .strides = {}};
  // A key is read before Borrow() checks the descriptor: an ndim it refuses copies nothing
  // (such a key never equals a kept one, whose ndim Borrow() accepted).
  constexpr std::int32_t kMaxDims = 64;
  if (tensor.ndim <= 0 || tensor.ndim > kMaxDims) {
    return key;
  }
  if (tensor.shape != nullptr) {
    key.shape.assign(tensor.shape, tensor.shape + tensor.ndim);
  }
  if (tensor.strides != nullptr) {
    key.strides.assign(tensor.strides, tensor.strides + tensor.ndim);
  }
  return key;
}

const GradientMap& NamedTensors::Read(const char* const* names, const DLTensor* const* tensors, std::size_t count,
                                      const char* tensors_name) {
  if (count > 0 && names == nullptr) {
    throw ArgumentNullError("names");
  }
  if (count > 0 && tensors == nullptr) {
    throw ArgumentNullError(tensors_name);
  }
  std::vector<Key> keys;
  keys.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (names[i] == nullptr) {
      throw ArgumentNullError(Indexed("names", i));
    }
    if (tensors[i] == nullptr) {
      throw ArgumentNullError(Indexed(tensors_name, i));
    }
    keys.push_back(KeyOf(names[i], *tensors[i]));
  }
  pending_is_kept_ = keys == kept_keys_ && !kept_keys_.empty();
  if (pending_is_kept_) {
    return kept_;
  }
  GradientMap map;
  for (std::size_t i = 0; i < count; ++i) {
    TensorPtr tensor = Borrow(tensors[i], Indexed(tensors_name, i));
    if (!map.emplace(names[i], std::move(tensor)).second) {
      throw ArgumentError(Indexed("names", i), "'" + std::string(names[i]) + "' is given twice (names must be unique)");
    }
  }
  pending_keys_ = std::move(keys);
  pending_ = std::move(map);
  return pending_;
}

void NamedTensors::Commit() {
  if (pending_is_kept_) {
    return;
  }
  kept_keys_ = std::move(pending_keys_);
  kept_ = std::move(pending_);
  pending_keys_.clear();
  pending_.clear();
}

StreamScope::StreamScope(void* stream, const Device& device) {
  if (stream == nullptr) {
    return;
  }
  if (!device.IsCUDA()) {
    throw ArgumentError(
        "stream", "is a CUDA stream but the tensors are on " + device.ToString() + " (pass NULL for CPU tensors)");
  }
  guard_.emplace(stream, device.Index);
}

Device DeviceOf(const GradientMap& tensors) {
  return tensors.empty() ? Device::CPU() : tensors.begin()->second->GetDevice();
}

}  // namespace mlframework::c_api
