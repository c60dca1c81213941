#pragma once
// Private: whether two tensors are the same gradients, told by their memory rather than by the
// tensor objects. A framework that owns its tensors may wrap the same memory in a new TensorPtr
// every step (backends::cpu::Wrap, FromDLPack), so object identity would miss it.

#include <mlframework/core/ITensor.hpp>

namespace mlframework::detail {

/// True when @p a and @p b are the same object, or hold the same elements in memory: the same
/// device, dtype and element count and the same first element (host memory through HostBytes(),
/// device memory through the device backend's DataPointer hook). Tensors whose memory cannot be
/// told (no elements, no host bytes and no hook that knows them) are the same only as themselves.
bool SameMemory(const ITensor& a, const ITensor& b);

}  // namespace mlframework::detail
