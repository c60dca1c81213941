#pragma once
// Private: where CPU tensors of up to 32 KiB keep their elements.
//
// Why a pool: a model has thousands of small tensors (biases, norms, small layers), each
// allocated on its own. With malloc they land wherever a hole fits, between the framework's
// other allocations and out of order, and a fused kernel over the list then streams through
// thousands of short, scattered runs of memory. A plain read loop over such a list ran 1.2-1.8x
// as long as over one flat buffer, while the same tensors placed one after another in the order
// they were made ran as fast as flat. So this pool hands memory
// out in the order it is asked for: a list of small tensors made one after another lies back to
// back, as in a framework's contiguous gradient buffer, without the framework asking for one.
//
// How (one mutex; allocation is rare next to the kernels that read the memory):
// - Memory comes in 2 MiB blocks aligned to their size, so a pointer finds its block by masking.
// - A request is rounded up to 64 bytes (a cache line: every tensor stays 64-byte aligned) and
//   takes (1) the slot of exactly that size freed most recently, if any: a training step that
//   frees and makes the same shapes again gets the same memory back; else (2) the next bytes of
//   the current block.
// - A block with no live slot left is emptied at once: its free slots are forgotten, and it goes
//   back to its start (the current block) or onto a short list of spare blocks (at most
//   kMaxSpareBlocks; more go back to the system). So when a whole list of tensors is freed, the
//   next list again lies back to back.
// - Memory held beyond the live bytes is therefore the spare blocks, the current block's unused
//   end, the ends of earlier blocks too short for the request that moved on (under 32 KiB each),
//   and freed slots in blocks that still hold live ones; those are reused by later requests of
//   the same rounded size, so a loop that repeats its allocations does not grow.
// - Under AddressSanitizer every byte not handed out (free slots, the rounding up, unused block
//   ends) is poisoned, so overflows and uses after free are still reported.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace mlframework::backends::cpu {

class SmallBufferPool {
 public:
  static constexpr std::size_t kAlignment = 64;                     // every slot starts on a cache line
  static constexpr std::size_t kMaxBytes = std::size_t{32} * 1024;  // larger requests do not come here
  static constexpr std::size_t kBlockBytes = std::size_t{2} * 1024 * 1024;
  static constexpr std::size_t kMaxSpareBlocks = 16;  // emptied blocks kept for reuse

  struct Stats {
    std::size_t blocks = 0;        // blocks in use (at least one live slot, or the current block)
    std::size_t spare_blocks = 0;  // emptied blocks kept for reuse
    std::size_t live_slots = 0;    // allocations not yet freed
    std::size_t live_bytes = 0;    // their bytes, each rounded up to kAlignment
  };

  SmallBufferPool() = default;
  ~SmallBufferPool();  // returns every block, live slots or not
  SmallBufferPool(const SmallBufferPool&) = delete;
  SmallBufferPool& operator=(const SmallBufferPool&) = delete;

  // The pool CPU tensors use. Never destroyed: a tensor held by a static may be freed after
  // every static of this library is gone.
  static SmallBufferPool& Process();

  // kAlignment-aligned memory for 1 to kMaxBytes bytes. ArgumentError for other sizes;
  // std::bad_alloc when the system has no memory for a new block. The pool is unchanged by
  // either.
  void* Allocate(std::size_t bytes);

  // Gives back what Allocate(bytes) returned. ArgumentError, with the pool unchanged, for a
  // size out of range, a pointer this pool does not hold live (never allocated, or freed
  // already) or a size that does not round to the one it was allocated with; nothing else is
  // thrown.
  void Free(void* pointer, std::size_t bytes);

  Stats GetStats() const;

 private:
  struct Block {
    std::byte* base = nullptr;
    std::size_t used = 0;  // bytes handed out from the start (the bump offset)
    std::size_t live_slots = 0;
    std::uint64_t generation = 0;  // changes when the block is emptied: its free slots expire
    // Per 64 bytes of the block: the size class of the live slot starting there, or 0. Free
    // checks a pointer and its size against it (3% of the block).
    std::vector<std::uint16_t> live_class;
  };
  struct FreeSlot {
    std::byte* pointer;
    std::uint64_t generation;  // the block's generation when the slot was freed
  };

  static std::size_t SizeClass(std::size_t bytes) { return (bytes + kAlignment - 1) / kAlignment; }
  Block* FindBlock(const void* pointer);
  Block& NewCurrentBlock();
  std::byte* TakeFreeSlot(std::size_t size_class, Block*& block);
  static void MarkLive(Block& block, std::byte* pointer, std::size_t bytes, std::size_t size_class);
  void EmptyBlock(Block& block);

  mutable std::mutex mutex_;
  std::unordered_map<std::uintptr_t, Block> blocks_;  // by base address; nodes never move
  Block* current_ = nullptr;                          // the block new memory is cut from
  std::vector<std::byte*> spares_;
  std::vector<std::vector<FreeSlot>> free_slots_ = std::vector<std::vector<FreeSlot>>(kMaxBytes / kAlignment + 1);
  std::uint64_t next_generation_ = 1;
};

// Memory for a CPU tensor's elements, 64-byte aligned: from the process pool for small
// requests when SmallTensorPool() (CpuTensor.hpp) is on; for 2 MiB and more, when HugePages()
// is on, 2 MiB aligned with huge pages asked for (HugePages.hpp); else from the aligned
// operator new. Zero bytes is allowed.
void* AllocateTensorBytes(std::size_t bytes);
// Gives back AllocateTensorBytes(bytes). A pointer the pool does not hold live is memory
// corruption: the process stops with a message instead of going on.
void FreeTensorBytes(void* pointer, std::size_t bytes) noexcept;

// The allocator under the CPU tensors' xtensor containers (the standard names of an allocator's
// members are required, hence the NOLINTs of the naming rule).
template <typename T>
struct TensorAllocator {
  using value_type = T;  // NOLINT(readability-identifier-naming)

  TensorAllocator() noexcept = default;
  template <typename U>
  TensorAllocator(const TensorAllocator<U>& /*other*/) noexcept {}

  T* allocate(std::size_t count) {  // NOLINT(readability-identifier-naming)
    if (count > static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(T)) {
      throw std::bad_array_new_length();
    }
    return static_cast<T*>(AllocateTensorBytes(count * sizeof(T)));
  }
  // NOLINTNEXTLINE(readability-identifier-naming)
  void deallocate(T* pointer, std::size_t count) noexcept { FreeTensorBytes(pointer, count * sizeof(T)); }

  friend bool operator==(const TensorAllocator& /*a*/, const TensorAllocator& /*b*/) noexcept { return true; }
};

}  // namespace mlframework::backends::cpu
