#pragma once
// Private: what makes a list "the same tensors again" for the kept plans (PlanCaches.hpp, ListCache).
//
// The key is the list's tensor objects, in order: a CpuTensor never changes its data pointer,
// size, dtype or shape, so a list that holds the same live tensor objects in the same order as
// an earlier call has that call's plan. A key is valid only while no tensor that any key held
// has been destroyed since the key was made: each tensor a key holds is marked
// (CpuTensor::MarkKept), and destroying a marked tensor advances a generation count, which
// invalidates every key made before. While a key is valid, each of its pointers still names the
// live tensor it named, so a list with the same pointers is that list. Comparing reads the
// caller's array of shared_ptrs and the key's array of pointers, in order; no tensor object is
// read. Nothing is kept alive: a weak_ptr per tensor would keep control blocks after the lists
// died, and those scattered the next lists' tensors further on the heap.
//
// All of that lives in this one class, so that keying on the memory instead (pointer, size,
// dtype, device) changes this file only.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <mlframework/core/ITensor.hpp>

namespace mlframework::backends::cpu {

/// The tensors of one call as the caller holds them: one list (the second empty), or a cast's
/// source and destination.
using TensorLists = std::array<std::span<const TensorPtr>, 2>;

/// Called by a CpuTensor that a key held when it is destroyed: no key made before is valid again.
void KeptTensorDestroyed() noexcept;

class ListKey {
 public:
  /// The generation count now: read it before planning the lists a key is made for.
  static std::uint64_t Generation() noexcept;

  /// The key of @p lists, all CPU tensors, planned after Generation() read @p generation.
  /// Marks every tensor kept.
  ListKey(const TensorLists& lists, std::uint64_t generation);

  /// False once a tensor held by any key has been destroyed since this key was made.
  bool Valid() const noexcept;
  /// True when this key is valid and @p lists hold exactly its tensors, in order.
  bool Matches(const TensorLists& lists) const;

 private:
  std::uint64_t generation_;  // the generation count before the lists were planned
  std::array<std::size_t, 2> sizes_{};
  std::vector<const ITensor*> objects_;  // the lists' tensors, one list after the other
};

}  // namespace mlframework::backends::cpu
