#pragma once
/// @file TensorListView.hpp
/// @brief The list a backend operation runs over (TensorBackend.hpp).

#include <span>

#include <mlframework/core/ITensor.hpp>

namespace mlframework {

/// The tensors of one backend operation, as the caller holds them.
///
/// Each entry describes its memory through ITensor (device, dtype, element count, and its bytes
/// when the library can see them). The view holds the caller's own array rather than a copy of
/// those descriptions, so a backend that keeps what it learnt about a list (the CPU backend's
/// plans) recognises a list passed again without reading its tensor objects.
struct TensorListView {
  /// The tensors, in the caller's order.
  std::span<const TensorPtr> Tensors;
  /// True when core's dispatcher grouped the list: every entry is non-null and a tensor of the
  /// backend that receives it. False for a whole list offered to the backend of its first entry
  /// before any walk: the backend runs it when it can tell from what it keeps that every entry is
  /// its own, and declines it (nullopt) otherwise.
  bool Grouped = false;
};

}  // namespace mlframework
