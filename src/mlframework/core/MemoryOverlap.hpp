#pragma once
// Private: finds two tensors of a call that share memory (the optimizers' parameter and gradient
// maps, the fused steps' lists).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include <mlframework/core/ITensor.hpp>

namespace mlframework::detail {

/// The memory of one tensor of a call and whether the call writes it: the byte range of a host
/// tensor, or, for a tensor without host memory, its object's address (End 0): the library cannot
/// see where a device tensor's memory lies, so one object twice is all it can find.
struct MemoryUse {
  std::uintptr_t Begin = 0;
  std::uintptr_t End = 0;
  bool Written = true;

  /// The use of @p tensor (not null).
  static MemoryUse Of(const ITensor& tensor, bool written) {
    const std::span<const std::byte> bytes = tensor.HostBytes();
    if (bytes.empty()) {
      return {.Begin = reinterpret_cast<std::uintptr_t>(&tensor), .End = 0, .Written = written};
    }
    const auto begin = reinterpret_cast<std::uintptr_t>(bytes.data());
    return {.Begin = begin, .End = begin + bytes.size(), .Written = written};
  }
  bool IsObject() const noexcept { return End == 0; }
  bool operator==(const MemoryUse&) const = default;
};

/// Two entries of a MemoryUse list (indices into it) that share memory.
struct SharedMemory {
  std::size_t Earlier = 0;  ///< The entry met first (lower address; at one address, the lower index).
  std::size_t Later = 0;    ///< The entry that overlaps it.
  bool Same = false;        ///< Both are the same memory (one byte range, or one tensor object).
};

/// The first two entries of @p uses that share memory where at least one is written (two read-only
/// entries may share it), or none. A function of @p uses alone. Sorted vectors, O(n log n).
inline std::optional<SharedMemory> FindSharedMemory(std::span<const MemoryUse> uses) {
  std::vector<std::size_t> ranges;
  std::vector<std::size_t> objects;
  ranges.reserve(uses.size());
  for (std::size_t i = 0; i < uses.size(); ++i) {
    (uses[i].IsObject() ? objects : ranges).push_back(i);
  }
  // Stable: at one address the entries keep their order, so the later index is the one named.
  const auto begin = [&](std::size_t i) { return uses[i].Begin; };
  std::ranges::stable_sort(ranges, {}, begin);
  // Of the ranges so far, the one that ends last, and the written one that ends last: a range
  // overlaps an earlier written one iff it starts before the latter's end, and a written range
  // overlaps an earlier one iff it starts before the former's end.
  std::optional<std::size_t> reaching;
  std::optional<std::size_t> reaching_written;
  for (const std::size_t i : ranges) {
    const MemoryUse& range = uses[i];
    std::optional<std::size_t> hit;
    if (reaching_written && range.Begin < uses[*reaching_written].End) {
      hit = reaching_written;
    } else if (range.Written && reaching && range.Begin < uses[*reaching].End) {
      hit = reaching;
    }
    if (hit) {
      const MemoryUse& other = uses[*hit];
      return SharedMemory{.Earlier = *hit, .Later = i, .Same = range.Begin == other.Begin && range.End == other.End};
    }
    if (!reaching || range.End > uses[*reaching].End) {
      reaching = i;
    }
    if (range.Written && (!reaching_written || range.End > uses[*reaching_written].End)) {
      reaching_written = i;
    }
  }
  std::ranges::stable_sort(objects, {}, begin);
  // In a run of entries of one object, a written one is next to another.
  for (std::size_t k = 1; k < objects.size(); ++k) {
    const MemoryUse& a = uses[objects[k - 1]];
    const MemoryUse& b = uses[objects[k]];
    if (a.Begin == b.Begin && (a.Written || b.Written)) {
      return SharedMemory{.Earlier = objects[k - 1], .Later = objects[k], .Same = true};
    }
  }
  return std::nullopt;
}

}  // namespace mlframework::detail
