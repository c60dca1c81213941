#pragma once
// Private: the host bookkeeping of a CUDA view (plain C++, so it is tested without a GPU).

#include <cstddef>
#include <string>

#include <mlframework/core/Error.hpp>

namespace mlframework::backends::cuda {

/// Byte offset of a view of @p count elements starting at element @p offset of a tensor of
/// @p base_size elements of @p element_size bytes; ArgumentError (parameter "shape") when the
/// view does not fit, with the sizes in the message (the same words as cpu::View).
inline std::size_t ViewByteOffset(std::size_t base_size, std::size_t element_size, std::size_t offset,
                                  std::size_t count) {
  if (offset > base_size || count > base_size - offset) {
    throw ArgumentError("shape", "view of " + std::to_string(count) + " elements at offset " + std::to_string(offset) +
                                     " does not fit in a tensor of " + std::to_string(base_size) + " elements");
  }
  return offset * element_size;
}

}  // namespace mlframework::backends::cuda
