#pragma once
// Private: what makes a list "the same tensors again" for the kept plans (PlanCaches.hpp, ListCache).
//
// The key is the lists' memory, in order: for each tensor its first element's address, its
// element count and its dtype (all on the CPU). A plan is a function of exactly those (Plan.hpp:
// segments of addresses and dtypes, counts), so a list over the same memory has the same plan
// whatever tensor objects hold it: the framework may wrap its memory in new tensors every step
// (cpu::Wrap, FromDLPack), or free a list and allocate one at the same addresses, and the kept
// plan is still right. Memory that changed at any position (another address, count or dtype)
// misses. Nothing is kept alive and nothing needs invalidating: a key's addresses are only
// compared, never read, and a plan is run only for a list that holds live memory at them.
//
// Fast path: while no tensor a key holds has been destroyed (KeptGeneration() unchanged since the
// key was made; the key marks its tensors with CpuTensor::MarkKept), each tensor object the key
// names is still alive over the key's memory, so a list holding the same objects in the same
// order is the key's list, told from the caller's array of pointers alone. That keeps a list
// passed again cheap when its tensor objects are cold in the caches (a training step that has
// moved gigabytes since): reading thousands of scattered objects then costs a cache and TLB miss
// each. Lists wrapped anew each step take the memory path below instead.
//
// Comparing reads each tensor's first cache line (CpuTensor keeps its vtable pointer, data,
// size and dtype together) and allocates nothing. Whether an entry is a CpuTensor at all is told
// by its dynamic type, read through the same vtable pointer, against the type of the tensors the
// key was made of: no virtual call per tensor. A cast's key also needs each source and
// destination shape to be equal (the check a cast of kept lists skips), which the counts prove for
// tensors of rank 0 or 1 and which is compared only for higher ranks.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <typeinfo>
#include <vector>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>

namespace mlframework::backends::cpu {

/// The tensors of one call as the caller holds them: one list (the second empty), or a cast's
/// source and destination.
using TensorLists = std::array<std::span<const TensorPtr>, 2>;

/// Advanced each time a CpuTensor marked kept is destroyed (defined with CpuTensor, exported so
/// a copy of ListKey compiled into a test reads the library's count).
MLFRAMEWORK_EXPORT std::uint64_t KeptGeneration() noexcept;

class ListKey {
 public:
  /// The key of @p lists, all CPU tensors (the caller planned them), at least one.
  explicit ListKey(const TensorLists& lists);

  /// True when @p lists hold CPU tensors over exactly this key's memory, in order (and, for a
  /// cast, the same shapes pairwise). Null entries and other tensors miss.
  bool Matches(const TensorLists& lists) const;

  /// A hash of the key's memory: equal keys have equal fingerprints.
  std::uint64_t Fingerprint() const noexcept;

 private:
  struct Memory {
    const void* data;
    std::size_t size;
    DataType dtype;
    bool operator==(const Memory&) const = default;
  };

  // True when @p lists hold exactly the key's tensor objects, in order (reads only the caller's array).
  bool SameObjects(const TensorLists& lists) const noexcept;

  std::vector<const ITensor*> objects_;  // the tensor objects the key was made of, marked kept
  std::uint64_t generation_ = 0;         // KeptGeneration() after they were marked
  const std::type_info* type_;           // the dynamic type of the tensors the key was made of (CpuTensor)
  std::array<std::size_t, 2> sizes_{};
  std::vector<Memory> memory_;  // the lists' tensors, one list after the other
};

}  // namespace mlframework::backends::cpu
