#pragma once
// Private: the caching allocator of one FSDP, in the spirit of PyTorch's caching allocator
// and DeepSpeed's reused flat buffers. Every Gather() needs a full unit's worth of memory and
// every ReduceGradients() a flat gradient buffer; a fresh 64 MB allocation each time costs
// more than the collective (page faults plus zero filling), so the buffers are handed back on
// Release() and reused by the next unit. Idle blocks are capped at what the largest unit needs
// at once, which keeps the ZeRO-3 memory figure (16 B x parameters / ranks + the largest
// gathered unit) intact.

#include <cstddef>
#include <vector>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Device.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/TensorBackend.hpp>

namespace mlframework::distributed::fsdp::detail {

// Where one FSDP keeps its unit buffers, and the backend that allocates and views them. The
// parameters' own backend when it can allocate and view on their device: the buffers live where
// the parameters live and collectives run on them in place. Otherwise (parameters without a
// backend, or whose backend keeps the TensorBackend defaults) the backend of core's CPU
// tensors, on the host: correct for any tensor, staged through host copies.
struct Placement {
  Device device = Device::CPU();           // the parameters' device
  Device buffer_device = Device::CPU();    // where the unit buffers live
  const TensorBackend* backend = nullptr;  // makes the unit buffers; set with the first unit

  // A zero-filled flat tensor of @p elements elements of @p dtype on the buffer device.
  TensorPtr Allocate(std::size_t elements, DataType dtype) const;
  // An aliasing view of @p base (a tensor from Allocate(), a view of one, or a tensor Holds()).
  TensorPtr View(const TensorPtr& base, std::size_t offset, const Shape& shape) const;
  // True when @p tensor is one this placement could have allocated (same backend and device),
  // so it can be viewed and reused as a unit buffer.
  bool Holds(const ITensor& tensor) const noexcept;
};

// A buffer from the pool: `tensor` (exactly the requested elements) is a view of `block`
// (the pooled storage, possibly larger). Empty when not from the pool.
struct PooledBuffer {
  TensorPtr block;
  TensorPtr tensor;
};

class BufferPool {
 public:
  // Allocates through @p placement (owned by the FSDP, outlives the pool).
  explicit BufferPool(const Placement& placement) noexcept : placement_(&placement) {}
  // A tensor on the placement's device of @p elements elements of @p dtype whose contents are unspecified (the
  // caller writes every element): the smallest idle block that fits, else a new block.
  PooledBuffer Acquire(DataType dtype, std::size_t elements);
  // Takes @p buffer back and empties it. Its block is kept for reuse only when nothing else
  // references its storage any more (a view the framework kept past Release() keeps the
  // memory to itself) and the idle blocks stay within the capacity (the smallest go first).
  void Return(PooledBuffer& buffer) noexcept;
  // Bytes of idle blocks kept at most; idle blocks beyond it are freed now.
  void SetCapacity(std::size_t bytes) noexcept;
  std::size_t Capacity() const noexcept { return capacity_; }
  // Bytes held by idle blocks.
  std::size_t IdleBytes() const noexcept { return idle_bytes_; }
  // Bytes of the blocks handed out by Acquire() and not given back to Return() yet.
  std::size_t InUseBytes() const noexcept { return in_use_bytes_; }
  // Frees every idle block.
  void Clear() noexcept;

 private:
  void Trim() noexcept;
  const Placement* placement_;
  std::vector<TensorPtr> idle_;
  std::size_t idle_bytes_ = 0;
  std::size_t in_use_bytes_ = 0;
  std::size_t capacity_ = 0;
};

}  // namespace mlframework::distributed::fsdp::detail
