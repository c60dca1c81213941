#pragma once
// Private: how the library walks long lists of tensor objects on the host (the front end's
// one-backend check in core/MultiTensor.cpp and the CPU backend's plan).

#include <cstddef>

namespace mlframework::detail {

/// Tensor objects lie scattered on the heap: a walk asks for the object this many entries
/// ahead, so its first cache line (vtable pointer, data, size, dtype) arrives in time.
inline constexpr std::size_t kObjectPrefetchAhead = 8;

/// Lists this long are walked on every OpenMP thread. Reading each scattered tensor object is
/// the serial part of a call (about 40 ns a tensor with the objects out of cache: 15% of the
/// time of a 64M-element list of 26,000 small tensors on two threads).
inline constexpr std::size_t kParallelWalkTensors = 1024;

}  // namespace mlframework::detail
