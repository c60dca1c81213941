#include <mlframework/core/ITensor.hpp>

#include <mlframework/core/Error.hpp>

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

const TensorBackend* ITensor::Backend() const noexcept { return nullptr; }

std::span<std::byte> ITensor::HostStorage() const noexcept { return {}; }

}  // namespace mlframework
