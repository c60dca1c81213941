#pragma once
// The C API's state bytes: the C++ StateDict() blobs copied into the caller's buffer, and back.

#include <cstddef>
#include <span>
#include <vector>

#include "Call.hpp"

namespace mlframework::c_api {

/// Copies @p bytes into @p buffer (see the `*_state_dict` functions of the C headers): with a
/// null @p buffer only the size is written; ArgumentError naming `capacity` when it is too small.
void WriteBlob(const std::vector<std::byte>& bytes, void* buffer, std::size_t capacity, std::size_t* size);

/// The @p size bytes at @p data; ArgumentNullError("data") when null with a non-zero size.
std::span<const std::byte> ReadBlob(const void* data, std::size_t size);

/// A `*_state_dict` entry point: @p save(handle) (a StateDict()) into the caller's buffer.
template <class Handle, class Save>
mlfw_status SaveState(Handle* handle, const char* name, void* buffer, std::size_t capacity, std::size_t* size,
                      Save save) noexcept {
  return Call([&] { WriteBlob(save(Deref(handle, name)), buffer, capacity, size); });
}

/// A `*_load_state_dict` entry point: @p load(handle, bytes) (a LoadStateDict()).
template <class Handle, class Load>
mlfw_status LoadState(Handle* handle, const char* name, const void* data, std::size_t size, Load load) noexcept {
  return Call([&] { load(Deref(handle, name), ReadBlob(data, size)); });
}

}  // namespace mlframework::c_api
