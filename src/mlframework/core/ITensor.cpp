#include <mlframework/core/ITensor.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/HostConversion.hpp>
#include <mlframework/core/TensorBackend.hpp>

#include "mlframework/core/DeviceFactory.hpp"
#include "mlframework/core/HostAlias.hpp"

namespace mlframework {

std::size_t ElementCount(const Shape& shape) {
  std::size_t count = 1;
  for (const std::size_t extent : shape) {
    if (extent != 0 && count > SIZE_MAX / extent) {
      throw ArgumentError("shape", ToString(shape) + " has more elements than fit in size_t");
    }
    count *= extent;
  }
  return count;
}

std::string ToString(const Shape& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  }
  return text + "]";
}

ITensor::~ITensor() = default;

bool ITensor::HasNonFinite() const { return HasInf() || HasNaN(); }

void ITensor::CopyToFloats(std::span<float> out) const {
  const std::size_t size = Size();
  if (out.size() != size) {
    throw ArgumentError("out", "has " + std::to_string(out.size()) + " elements, tensor " + ToString(GetShape()) +
                                   " has " + std::to_string(size));
  }
  if (size == 0) {
    return;
  }
  const DataType dtype = GetDataType();
  const std::span<const std::byte> bytes = HostBytes();
  // Misaligned host bytes go through ToFloatVector(): the conversion kernels read whole elements.
  if (IsValid(dtype) && bytes.size() / ElementSize(dtype) == size && bytes.size() % ElementSize(dtype) == 0 &&
      reinterpret_cast<std::uintptr_t>(bytes.data()) % ElementSize(dtype) == 0) {
    ConvertHostElements(bytes.data(), dtype, out.data(), DataType::Float32, size);
    return;
  }
  const std::vector<float> values = ToFloatVector();
  if (values.size() != size) {
    throw InvalidOperationError("ToFloatVector() returned " + std::to_string(values.size()) +
                                " elements for a tensor of " + std::to_string(size));
  }
  std::copy(values.begin(), values.end(), out.begin());
}

bool ITensor::UnscaleAndCheck(float factor) {
  const WritePassOptions options{.Op = WriteOp::Scale, .Factor = factor, .Check = true};
  if (const TensorBackend* backend = Backend()) {
    // Non-owning (the aliasing constructor without an owner): *this outlives the call.
    const TensorPtr self(TensorPtr(), this);
    if (const std::optional<WritePassResult> result = backend->Write({{&self, 1}, true}, {}, options)) {
      return result->FoundNonFinite;
    }
  }
  // No owner: the alias lives only for this call, while *this does.
  if (const TensorPtr alias = detail::HostAlias(*this, nullptr)) {
    if (const std::optional<WritePassResult> result =
            detail::BackendOf(Device::CPU()).Write({{&alias, 1}, true}, {}, options)) {
      return result->FoundNonFinite;
    }
  }
  MultiplyInPlace(factor);
  return HasNonFinite();
}

const TensorBackend* ITensor::Backend() const noexcept { return nullptr; }

std::span<std::byte> ITensor::HostStorage() const noexcept { return {}; }

}  // namespace mlframework
