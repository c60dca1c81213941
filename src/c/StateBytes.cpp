#include "StateBytes.hpp"

#include <algorithm>
#include <string>

#include <mlframework/core/Error.hpp>

namespace mlframework::c_api {

void WriteBlob(const std::vector<std::byte>& bytes, void* buffer, std::size_t capacity, std::size_t* size) {
  if (size == nullptr) {
    throw ArgumentNullError("size");
  }
  if (buffer != nullptr) {
    if (capacity < bytes.size()) {
      throw ArgumentError("capacity", std::to_string(capacity) + " is less than the " + std::to_string(bytes.size()) +
                                          " bytes of the state (call with a null buffer for the size)");
    }
    std::copy(bytes.begin(), bytes.end(), static_cast<std::byte*>(buffer));
  }
  *size = bytes.size();
}

std::span<const std::byte> ReadBlob(const void* data, std::size_t size) {
  if (data == nullptr && size > 0) {
    throw ArgumentNullError("data");
  }
  return {static_cast<const std::byte*>(data), size};
}

}  // namespace mlframework::c_api
