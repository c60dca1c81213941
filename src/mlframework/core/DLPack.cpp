#include <mlframework/core/DLPack.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dlpack/dlpack.h>

#include <mlframework/core/Error.hpp>

#include "mlframework/core/DeviceFactory.hpp"

namespace mlframework {

namespace {

std::string Field(const std::string& name) { return "managed->dl_tensor." + name; }

DataType DTypeOf(const DLDataType& dtype) {
  if (dtype.lanes == 1 && dtype.code == kDLFloat && dtype.bits == 32) {
    return DataType::Float32;
  }
  if (dtype.lanes == 1 && dtype.code == kDLFloat && dtype.bits == 16) {
    return DataType::Float16;
  }
  if (dtype.lanes == 1 && dtype.code == kDLBfloat && dtype.bits == 16) {
    return DataType::BFloat16;
  }
  throw ArgumentError(Field("dtype"), "{code " + std::to_string(dtype.code) + ", bits " + std::to_string(dtype.bits) +
                                          ", lanes " + std::to_string(dtype.lanes) +
                                          "} is not float32, float16 or bfloat16 with one lane");
}

Device DeviceOf(const DLDevice& device) {
  if (device.device_type == kDLCPU) {
    return Device::CPU();
  }
  if (device.device_type == kDLCUDA) {
    if (device.device_id < 0) {
      throw ArgumentError(Field("device.device_id"), "must be >= 0, got " + std::to_string(device.device_id));
    }
    return Device::CUDA(device.device_id);
  }
  throw ArgumentError(Field("device.device_type"),
                      std::to_string(static_cast<int>(device.device_type)) + " is not kDLCPU (1) or kDLCUDA (2)");
}

// The shape, after checking it and the strides (compact row-major; extent-1 dimensions may carry
// any stride, as PyTorch writes them; a tensor without elements any strides at all).
Shape ShapeOf(const DLTensor& tensor) {
  constexpr int kMaxDims = 64;  // DLPack leaves it open; anything deeper is a corrupt descriptor
  if (tensor.ndim < 0 || tensor.ndim > kMaxDims) {
    throw ArgumentError(Field("ndim"),
                        std::to_string(tensor.ndim) + " is outside [0, " + std::to_string(kMaxDims) + "]");
  }
  if (tensor.ndim > 0 && tensor.shape == nullptr) {
    throw ArgumentError(Field("shape"), "is null with ndim " + std::to_string(tensor.ndim));
  }
  Shape shape;
  shape.reserve(static_cast<std::size_t>(tensor.ndim));
  for (int i = 0; i < tensor.ndim; ++i) {
    if (tensor.shape[i] < 0) {
      throw ArgumentError(Field("shape[" + std::to_string(i) + "]"), "is negative: " + std::to_string(tensor.shape[i]));
    }
    shape.push_back(static_cast<std::size_t>(tensor.shape[i]));
  }
  // An empty tensor addresses no element, so its strides describe nothing, and producers write
  // them variously (ToDLPack() 0 before a zero extent, PyTorch the product of the extents >= 1).
  const bool empty = std::find(shape.begin(), shape.end(), std::size_t{0}) != shape.end();
  if (tensor.strides != nullptr && !empty) {
    std::int64_t expected = 1;
    for (int i = tensor.ndim - 1; i >= 0; --i) {
      if (tensor.shape[i] != 1 && tensor.strides[i] != expected) {
        throw ArgumentError(Field("strides[" + std::to_string(i) + "]"),
                            "is " + std::to_string(tensor.strides[i]) + " but a compact row-major tensor has " +
                                std::to_string(expected) + " (only contiguous memory is accepted)");
      }
      // Past the element count the product no longer matters (the shape check below rejects it).
      if (tensor.shape[i] > 0 && expected <= INT64_MAX / tensor.shape[i]) {
        expected *= tensor.shape[i];
      }
    }
  }
  return shape;
}

// Calls the managed tensor's deleter when the last tensor over its memory goes. The pointer is
// set only once the tensor exists, so a failed import never calls the deleter.
struct ManagedOwner {
  DLManagedTensor* managed = nullptr;
  ManagedOwner() = default;
  ManagedOwner(const ManagedOwner&) = delete;
  ManagedOwner& operator=(const ManagedOwner&) = delete;
  ~ManagedOwner() {
    if (managed != nullptr && managed->deleter != nullptr) {
      managed->deleter(managed);
    }
  }
};

// What an exported managed tensor holds: the tensor (keeps the memory alive) and its shape.
struct ExportContext {
  DLManagedTensor managed{};
  TensorPtr tensor;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
};

void DeleteExport(DLManagedTensor* managed) {
  delete static_cast<ExportContext*>(managed->manager_ctx);  // NOLINT(cppcoreguidelines-owning-memory)
}

}  // namespace

namespace {

// FromDLPack()'s import, with the dtype read by @p dtype_of (after the device, before the shape).
template <class DTypeOf>
TensorPtr Import(DLManagedTensor* managed, DTypeOf&& dtype_of) {
  if (managed == nullptr) {
    throw ArgumentNullError("managed");
  }
  const DLTensor& tensor = managed->dl_tensor;
  const Device device = DeviceOf(tensor.device);
  const DataType dtype = dtype_of(tensor.dtype);
  const Shape shape = ShapeOf(tensor);
  if (tensor.byte_offset % ElementSize(dtype) != 0) {
    throw ArgumentError(Field("byte_offset"), std::to_string(tensor.byte_offset) + " is not a multiple of the " +
                                                  std::to_string(ElementSize(dtype)) + "-byte elements of " +
                                                  std::string(ToString(dtype)));
  }
  if (tensor.data == nullptr && tensor.byte_offset != 0) {
    throw ArgumentError(Field("data"), "is null with byte_offset " + std::to_string(tensor.byte_offset));
  }
  // Pointer arithmetic reaches no further than PTRDIFF_MAX bytes, nor past the end of the
  // address space: such an offset addresses no memory and forming the pointer is undefined.
  if (tensor.byte_offset > static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max()) ||
      reinterpret_cast<std::uintptr_t>(tensor.data) > std::numeric_limits<std::uintptr_t>::max() - tensor.byte_offset) {
    throw ArgumentError(Field("byte_offset"),
                        std::to_string(tensor.byte_offset) + " carries data past the end of the address space");
  }
  void* data = tensor.data == nullptr ? nullptr : static_cast<std::byte*>(tensor.data) + tensor.byte_offset;
  detail::CheckWrapArguments(data, shape, dtype, Field("data"), Field("shape"));
  const detail::DeviceTensorHooks& hooks = detail::DeviceHooks(device);
  auto owner = std::make_shared<ManagedOwner>();
  TensorPtr result = hooks.Wrap(data, shape, dtype, device, owner);
  owner->managed = managed;  // from here on, the last tensor calls the deleter
  return result;
}

}  // namespace

TensorPtr FromDLPack(DLManagedTensor* managed) { return Import(managed, DTypeOf); }

TensorPtr FromDLPackAsFloat8(DLManagedTensor* managed, DataType float8) {
  if (float8 != DataType::Float8E4M3FN && float8 != DataType::Float8E5M2) {
    throw ArgumentError("float8", std::string(ToString(float8)) + " is not Float8E4M3FN or Float8E5M2");
  }
  return Import(managed, [float8](const DLDataType& dtype) {
    if (dtype.lanes == 1 && dtype.code == kDLUInt && dtype.bits == 8) {
      return float8;
    }
    throw ArgumentError(Field("dtype"), "{code " + std::to_string(dtype.code) + ", bits " + std::to_string(dtype.bits) +
                                            ", lanes " + std::to_string(dtype.lanes) +
                                            "} is not uint8 with one lane (the bytes of FP8 values)");
  });
}

DLManagedTensor* ToDLPack(const TensorPtr& tensor) {
  if (!tensor) {
    throw ArgumentNullError("tensor");
  }
  if (IsFloat8(tensor->GetDataType())) {
    // The legacy DLPack struct (0.6-0.8, what Debian's dlpack.h and libtorch's toDLPack speak)
    // has no type code for FP8: kDLFloat8_* arrived with DLPack 1.1.
    throw ArgumentError("tensor", "has dtype " + std::string(ToString(tensor->GetDataType())) +
                                      ", which DLPack 0.x (dlpack.h) cannot describe; cast it to Float16, "
                                      "BFloat16 or Float32 to export it");
  }
  const Device device = tensor->GetDevice();
  void* data = nullptr;
  if (tensor->Size() > 0) {
    data = detail::DeviceHooks(device).DataPointer(*tensor);
    if (data == nullptr && device.IsCPU()) {
      // Any tensor whose elements the host addresses (a user's ITensor over host memory) exports
      // too, when its bytes are exactly its elements, aligned, in its shape: the receiver reads
      // the shape's elements from there (the rule of the CPU kernels' alias, detail::HostAlias()).
      const std::span<std::byte> bytes = tensor->MutableHostBytes();
      const std::size_t element = ElementSize(tensor->GetDataType());
      if (!bytes.empty() && (bytes.size() % element != 0 || bytes.size() / element != tensor->Size() ||
                             reinterpret_cast<std::uintptr_t>(bytes.data()) % element != 0 ||
                             ElementCount(tensor->GetShape()) != tensor->Size())) {
        throw ArgumentError("tensor", "has no backend, and its HostBytes() (" + std::to_string(bytes.size()) +
                                          " bytes) are not its Size() " + std::to_string(tensor->Size()) +
                                          " elements of " + std::string(ToString(tensor->GetDataType())) +
                                          ", element-aligned, in its shape " + ToString(tensor->GetShape()) +
                                          ": the export would describe other memory");
      }
      data = bytes.data();
    }
    if (data == nullptr) {
      throw ArgumentError("tensor", "on " + device.ToString() +
                                        " is not a tensor of the library's backends, so its memory has no address "
                                        "to export");
    }
  }
  auto context = std::make_unique<ExportContext>();
  const detail::DeviceTensorHooks* hooks = device.IsCPU() ? nullptr : &detail::DeviceHooks(device);
  context->tensor = hooks != nullptr && hooks->Export != nullptr ? hooks->Export(tensor) : tensor;
  for (const std::size_t extent : tensor->GetShape()) {
    context->shape.push_back(static_cast<std::int64_t>(extent));
  }
  context->strides.assign(context->shape.size(), 1);
  for (std::size_t i = context->shape.size(); i-- > 1;) {
    context->strides[i - 1] = context->strides[i] * context->shape[i];
  }
  DLTensor& out = context->managed.dl_tensor;
  out.data = data;
  out.device = DLDevice{device.IsCUDA() ? kDLCUDA : kDLCPU, device.IsCUDA() ? device.Index : 0};
  out.ndim = static_cast<std::int32_t>(context->shape.size());
  switch (tensor->GetDataType()) {
    case DataType::Float32:
      out.dtype = DLDataType{kDLFloat, 32, 1};
      break;
    case DataType::Float16:
      out.dtype = DLDataType{kDLFloat, 16, 1};
      break;
    case DataType::BFloat16:
      out.dtype = DLDataType{kDLBfloat, 16, 1};
      break;
    case DataType::Float8E4M3FN:
    case DataType::Float8E5M2:
      break;  // refused above
  }
  out.shape = context->shape.data();
  out.strides = context->strides.data();
  out.byte_offset = 0;
  context->managed.manager_ctx = context.get();
  context->managed.deleter = &DeleteExport;
  return &context.release()->managed;
}

}  // namespace mlframework
