#include "mlframework/backends/cpu/SmallBufferPool.hpp"

#include "mlframework/backends/cpu/HugePages.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/Error.hpp>

#if defined(__SANITIZE_ADDRESS__)
#define MLFW_POOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MLFW_POOL_ASAN 1
#endif
#endif
#if defined(MLFW_POOL_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace mlframework::backends::cpu {

namespace {

// Bytes the kernels must not touch are poisoned under AddressSanitizer.
void Poison([[maybe_unused]] const void* pointer, [[maybe_unused]] std::size_t bytes) {
#if defined(MLFW_POOL_ASAN)
  ASAN_POISON_MEMORY_REGION(pointer, bytes);
#endif
}

void Unpoison([[maybe_unused]] const void* pointer, [[maybe_unused]] std::size_t bytes) {
#if defined(MLFW_POOL_ASAN)
  ASAN_UNPOISON_MEMORY_REGION(pointer, bytes);
#endif
}

constexpr std::align_val_t kBlockAlignment{SmallBufferPool::kBlockBytes};
constexpr std::align_val_t kTensorAlignment{SmallBufferPool::kAlignment};
constexpr std::align_val_t kHugePageAlignment{kHugePageBytes};

std::string Hex(const void* pointer) {
  char text[2 + 2 * sizeof(void*) + 1];
  std::snprintf(text, sizeof(text), "%p", pointer);
  return text;
}

void RequireSize(std::size_t bytes) {
  if (bytes == 0 || bytes > SmallBufferPool::kMaxBytes) {
    throw ArgumentError(
        "bytes", "must be 1 to " + std::to_string(SmallBufferPool::kMaxBytes) + ", got " + std::to_string(bytes));
  }
}

}  // namespace

SmallBufferPool::~SmallBufferPool() {
  for (const auto& [address, block] : blocks_) {
    Unpoison(block.base, kBlockBytes);
    ::operator delete(block.base, kBlockAlignment);
  }
  for (std::byte* base : spares_) {
    Unpoison(base, kBlockBytes);
    ::operator delete(base, kBlockAlignment);
  }
}

SmallBufferPool& SmallBufferPool::Process() {
  static auto* const kPool = new SmallBufferPool();
  return *kPool;
}

SmallBufferPool::Block* SmallBufferPool::FindBlock(const void* pointer) {
  const auto base = reinterpret_cast<std::uintptr_t>(pointer) & ~(std::uintptr_t{kBlockBytes} - 1);
  const auto found = blocks_.find(base);
  return found == blocks_.end() ? nullptr : &found->second;
}

SmallBufferPool::Block& SmallBufferPool::NewCurrentBlock() {
  Block block;
  block.live_class.assign(kBlockBytes / kAlignment, 0);
  const bool fresh = spares_.empty();
  if (fresh) {
    block.base = static_cast<std::byte*>(::operator new(kBlockBytes, kBlockAlignment));
    if (HugePages()) {
      AdviseHugePages(block.base, kBlockBytes);  // a block is one 2 MiB page
    }
    Poison(block.base, kBlockBytes);
  } else {
    block.base = spares_.back();  // poisoned whole since its last slot was freed
  }
  std::byte* base = block.base;
  try {
    block.generation = next_generation_;
    current_ = &blocks_.emplace(reinterpret_cast<std::uintptr_t>(base), std::move(block)).first->second;
  } catch (...) {
    if (fresh) {
      Unpoison(base, kBlockBytes);
      ::operator delete(base, kBlockAlignment);
    }
    throw;
  }
  if (!fresh) {
    spares_.pop_back();
  }
  ++next_generation_;
  return *current_;
}

std::byte* SmallBufferPool::TakeFreeSlot(std::size_t size_class, Block*& block) {
  std::vector<FreeSlot>& slots = free_slots_[size_class];
  while (!slots.empty()) {
    const FreeSlot slot = slots.back();
    slots.pop_back();
    // A slot of a block emptied since it was freed is gone: the block has started over.
    block = FindBlock(slot.pointer);
    if (block != nullptr && block->generation == slot.generation) {
      return slot.pointer;
    }
  }
  return nullptr;
}

void SmallBufferPool::MarkLive(Block& block, std::byte* pointer, std::size_t bytes, std::size_t size_class) {
  block.live_class[static_cast<std::size_t>(pointer - block.base) / kAlignment] =
      static_cast<std::uint16_t>(size_class);
  ++block.live_slots;
  Unpoison(pointer, bytes);
}

void* SmallBufferPool::Allocate(std::size_t bytes) {
  RequireSize(bytes);
  const std::size_t size_class = SizeClass(bytes);
  const std::size_t rounded = size_class * kAlignment;
  const std::lock_guard lock(mutex_);
  Block* owner = nullptr;
  if (std::byte* reused = TakeFreeSlot(size_class, owner)) {
    MarkLive(*owner, reused, bytes, size_class);
    return reused;
  }
  // The rest of a block too short for this request stays unused until the block empties.
  Block& block = current_ != nullptr && current_->used + rounded <= kBlockBytes ? *current_ : NewCurrentBlock();
  std::byte* pointer = block.base + block.used;
  block.used += rounded;
  MarkLive(block, pointer, bytes, size_class);
  return pointer;
}

void SmallBufferPool::EmptyBlock(Block& block) {
  // Its free slots expire with the generation; they are dropped when next met in a free list.
  if (&block == current_) {
    block.used = 0;
    block.generation = next_generation_++;
    return;
  }
  std::byte* base = block.base;
  blocks_.erase(reinterpret_cast<std::uintptr_t>(base));
  if (spares_.size() < kMaxSpareBlocks) {
    try {
      spares_.push_back(base);
      return;
    } catch (const std::bad_alloc&) {
      // No room to keep it: it goes back to the system like any block past the limit.
    }
  }
  Unpoison(base, kBlockBytes);
  ::operator delete(base, kBlockAlignment);
}

void SmallBufferPool::Free(void* pointer, std::size_t bytes) {
  RequireSize(bytes);
  const std::size_t size_class = SizeClass(bytes);
  const std::lock_guard lock(mutex_);
  Block* block = FindBlock(pointer);
  const std::size_t offset =
      block == nullptr ? 0 : static_cast<std::size_t>(static_cast<std::byte*>(pointer) - block->base);
  const std::size_t unit = offset / kAlignment;
  if (block == nullptr || offset % kAlignment != 0 || block->live_class[unit] == 0) {
    throw ArgumentError("pointer", Hex(pointer) +
                                       " is not memory this pool holds live (never allocated here, or "
                                       "freed already)");
  }
  if (block->live_class[unit] != size_class) {
    throw ArgumentError("bytes", std::to_string(bytes) + " for " + Hex(pointer) + ", which was allocated with " +
                                     std::to_string((block->live_class[unit] - 1) * kAlignment + 1) + " to " +
                                     std::to_string(block->live_class[unit] * kAlignment) + " bytes");
  }
  if (block->live_slots > 1) {
    try {
      free_slots_[size_class].push_back({static_cast<std::byte*>(pointer), block->generation});
    } catch (const std::bad_alloc&) {
      // Not listed, the slot is reused when its block empties; the counts below stay right.
    }
  }
  block->live_class[unit] = 0;
  --block->live_slots;
  Poison(pointer, size_class * kAlignment);
  if (block->live_slots == 0) {
    EmptyBlock(*block);
  }
}

SmallBufferPool::Stats SmallBufferPool::GetStats() const {
  const std::lock_guard lock(mutex_);
  Stats stats{blocks_.size(), spares_.size(), 0, 0};
  for (const auto& [address, block] : blocks_) {
    stats.live_slots += block.live_slots;
    for (const std::uint16_t size_class : block.live_class) {
      stats.live_bytes += size_class * kAlignment;
    }
  }
  return stats;
}

namespace {

// Where a request of `bytes` goes; AllocateTensorBytes and FreeTensorBytes must agree, and both
// switches are read once per process, so they always do.
bool FromPool(std::size_t bytes) { return bytes != 0 && bytes <= SmallBufferPool::kMaxBytes && SmallTensorPool(); }
bool OnHugePages(std::size_t bytes) { return bytes >= kHugePageBytes && HugePages(); }

}  // namespace

void* AllocateTensorBytes(std::size_t bytes) {
  if (FromPool(bytes)) {
    return SmallBufferPool::Process().Allocate(bytes);
  }
  if (OnHugePages(bytes)) {
    void* pointer = ::operator new(bytes, kHugePageAlignment);
    AdviseHugePages(pointer, bytes);
    return pointer;
  }
  return ::operator new(bytes, kTensorAlignment);
}

void FreeTensorBytes(void* pointer, std::size_t bytes) noexcept {
  if (FromPool(bytes)) {
    try {
      SmallBufferPool::Process().Free(pointer, bytes);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "mlframework: freeing CPU tensor memory: %s\n", error.what());
      std::abort();
    }
    return;
  }
  if (OnHugePages(bytes)) {
    ::operator delete(pointer, kHugePageAlignment);
    return;
  }
  ::operator delete(pointer, kTensorAlignment);
}

}  // namespace mlframework::backends::cpu
