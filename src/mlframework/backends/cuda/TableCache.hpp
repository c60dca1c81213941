#pragma once
// Private, host only: the uploaded table images a device keeps for lists passed again.
//
// A training step hands the backend the same long lists on every step (its gradients, its
// parameters). Writing a list's table image and copying it to the device costs the host
// about 20 ns a tensor, which for 10,000 small tensors is several times the kernel's own
// time. A table image holds only the tensors' device pointers, element counts and dtypes
// (LaunchPlan.hpp), so a list whose entries are equal, field by field, to those a table was
// uploaded for has exactly that image: the kernels can read the table already on the device.
// The key is the memory (pointer, size, dtype per slot, and the device), never the TensorPtr
// objects: a framework that wraps the same memory anew every step still hits, and memory that
// moved, or changed size or dtype, misses. Memory freed and reallocated at the same address
// with the same size and dtype gives the same image, so reusing its table is still right.
//
// No CUDA here, so the host tests drive it with fake tables; DeviceContext owns one per device
// and gives it the function that frees a table.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

/// What a kept table was uploaded for: the device and every entry of the list, empty ones
/// included, in order.
struct TableKey {
  int device = -1;
  std::vector<ListEntry> entries;

  /// The key of @p entries on @p device (copies them).
  static TableKey Of(int device, std::span<const ListEntry> entries);
  /// True when @p entries on @p device are the same memory, entry by entry: both pointers,
  /// both dtypes and the element count.
  bool Matches(int device, std::span<const ListEntry> entries) const noexcept;
};

/// A table kept on the device and the launch shape of its list.
struct KeptTable {
  TableKey key;
  std::byte* table = nullptr;  ///< device memory, owned by the cache
  std::int32_t count = 0;      ///< non-empty tensors (TableShape::count)
  std::uint64_t total = 0;     ///< elements of the list (TableShape::total)
};

/// The tables of one device, most recently used first, at most Capacity() of them. Not
/// thread-safe: DeviceContext calls it with its mutex held.
class TableCache {
 public:
  /// Frees a table's device memory; must not throw.
  using Release = std::function<void(std::byte*)>;

  /// Tables kept per device. Each costs 26 bytes of device memory and 40 bytes of host memory a
  /// tensor (0.26 MB and 0.4 MB for 10,000 tensors), and a step usually passes a few long
  /// lists (gradients, parameters, master weights, their casts).
  static constexpr std::size_t kDefaultCapacity = 8;

  /// An empty cache keeping at most @p capacity tables, freeing them with @p release.
  /// ArgumentError when @p capacity is 0 or @p release is empty.
  TableCache(std::size_t capacity, Release release);
  /// Frees every table it still holds.
  ~TableCache();
  TableCache(const TableCache&) = delete;
  TableCache& operator=(const TableCache&) = delete;

  /// The table uploaded for exactly @p entries on @p device, now the most recently used, or
  /// null. Compares the kept keys only: no allocation.
  const KeptTable* Find(int device, std::span<const ListEntry> entries) noexcept;
  /// Keeps @p table, whose image was written for @p key, as the most recently used; beyond
  /// Capacity() the least recently used table is freed. Takes ownership of @p table; a kept
  /// table with an equal key is freed and replaced.
  void Insert(TableKey key, std::byte* table, std::int32_t count, std::uint64_t total) noexcept;
  /// Frees every table.
  void Clear() noexcept;

  std::size_t Size() const noexcept { return kept_.size(); }
  std::size_t Capacity() const noexcept { return capacity_; }

 private:
  std::size_t capacity_;
  Release release_;
  std::vector<KeptTable> kept_;  // most recently used first; reserved to capacity_
};

}  // namespace mlframework::backends::cuda
