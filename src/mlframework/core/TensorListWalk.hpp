#pragma once
// Private: how the library walks long lists of tensor objects on the host (the front end's
// one-backend check in core/MultiTensor.cpp and the CPU backend's plan).

#include <cstddef>
#include <span>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/OptimizerStep.hpp>

namespace mlframework::detail {

/// Tensor objects lie scattered on the heap: a walk asks for the object this many entries
/// ahead, so its first cache line (vtable pointer, data, size, dtype) arrives in time.
inline constexpr std::size_t kObjectPrefetchAhead = 8;

/// Asks for the object of entry @p i of @p list, when there is one (a walk at entry j passes
/// j + kObjectPrefetchAhead).
inline void PrefetchObject(std::span<const TensorPtr> list, std::size_t i) {
  if (i < list.size()) {
    __builtin_prefetch(list[i].get());
  }
}

/// PrefetchObject() for entry @p i of every list of an optimizer step.
inline void PrefetchStepEntry(const OptimizerStepLists& lists, std::size_t i) {
  PrefetchObject(lists.Parameters, i);
  PrefetchObject(lists.Gradients, i);
  PrefetchObject(lists.FirstState, i);
  PrefetchObject(lists.SecondState, i);
  PrefetchObject(lists.LowPrecisionCopies, i);
}

/// Lists this long are walked on every OpenMP thread. Reading each scattered tensor object is
/// the serial part of a call (about 40 ns a tensor with the objects out of cache: 15% of the
/// time of a 64M-element list of 26,000 small tensors on two threads).
inline constexpr std::size_t kParallelWalkTensors = 1024;

}  // namespace mlframework::detail
