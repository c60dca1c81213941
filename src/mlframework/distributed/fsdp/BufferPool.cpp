#include "mlframework/distributed/fsdp/BufferPool.hpp"

#include <algorithm>
#include <utility>

namespace mlframework::distributed::fsdp::detail {

namespace {
std::size_t BytesOf(const TensorPtr& block) { return block->Size() * ElementSize(block->GetDataType()); }
}  // namespace

TensorPtr Placement::Allocate(std::size_t elements, DataType dtype) const {
  return backend->Allocate({elements}, dtype, buffer_device);
}

TensorPtr Placement::View(const TensorPtr& base, std::size_t offset, const Shape& shape) const {
  return backend->View(base, offset, shape);
}

bool Placement::Holds(const ITensor& tensor) const noexcept {
  try {
    return tensor.Backend() == backend && tensor.GetDevice() == buffer_device;
  } catch (...) {
    return false;  // a user tensor whose GetDevice() throws is no buffer of ours
  }
}

PooledBuffer BufferPool::Acquire(DataType dtype, std::size_t elements) {
  auto best = idle_.end();
  for (auto it = idle_.begin(); it != idle_.end(); ++it) {
    if ((*it)->GetDataType() == dtype && (*it)->Size() >= elements &&
        (best == idle_.end() || (*it)->Size() < (*best)->Size())) {
      best = it;
    }
  }
  PooledBuffer buffer;
  if (best != idle_.end()) {
    buffer.block = std::move(*best);
    idle_.erase(best);
    idle_bytes_ -= BytesOf(buffer.block);
  } else {
    // The one zero fill of a block's life; reuses write over whatever the last user left.
    buffer.block = placement_->Allocate(elements, dtype);
  }
  buffer.tensor = buffer.block->Size() == elements ? buffer.block : placement_->View(buffer.block, 0, {elements});
  in_use_bytes_ += BytesOf(buffer.block);
  return buffer;
}

void BufferPool::Return(PooledBuffer& buffer) noexcept {
  buffer.tensor.reset();
  TensorPtr block = std::move(buffer.block);
  buffer.block.reset();
  if (block) in_use_bytes_ -= BytesOf(block);
  // Any other owner (a view handed out earlier, kept by the framework) still reads this memory.
  if (!block || block.use_count() != 1) return;
  try {
    idle_.push_back(block);
  } catch (...) {
    return;  // no room to remember it: the block is simply freed
  }
  idle_bytes_ += BytesOf(block);
  Trim();
}

void BufferPool::SetCapacity(std::size_t bytes) noexcept {
  capacity_ = bytes;
  Trim();
}

void BufferPool::Clear() noexcept {
  idle_.clear();
  idle_bytes_ = 0;
}

void BufferPool::Trim() noexcept {
  // Over the cap: free the smallest idle blocks first, the large ones serve every unit.
  while (idle_bytes_ > capacity_ && !idle_.empty()) {
    const auto smallest = std::min_element(
        idle_.begin(), idle_.end(), [](const TensorPtr& a, const TensorPtr& b) { return BytesOf(a) < BytesOf(b); });
    idle_bytes_ -= BytesOf(*smallest);
    idle_.erase(smallest);
  }
}

}  // namespace mlframework::distributed::fsdp::detail
