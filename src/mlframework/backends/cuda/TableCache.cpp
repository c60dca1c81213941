#include "mlframework/backends/cuda/TableCache.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include <mlframework/core/Error.hpp>

namespace mlframework::backends::cuda {

namespace {

// Field by field: ListEntry has padding, which a memcmp would read.
bool SameMemory(const ListEntry& a, const ListEntry& b) noexcept {
  return a.src == b.src && a.dst == b.dst && a.size == b.size && a.src_dtype == b.src_dtype &&
         a.dst_dtype == b.dst_dtype;
}

}  // namespace

TableKey TableKey::Of(int device, std::span<const ListEntry> entries) {
  return TableKey{device, std::vector<ListEntry>(entries.begin(), entries.end())};
}

bool TableKey::Matches(int other_device, std::span<const ListEntry> other) const noexcept {
  if (other_device != device || other.size() != entries.size()) {
    return false;
  }
  // The ends first: a list that differs usually does so at its first or last tensor, and both
  // are cheaper to check than the whole list.
  if (!other.empty() && (!SameMemory(other.front(), entries.front()) || !SameMemory(other.back(), entries.back()))) {
    return false;
  }
  return std::equal(other.begin(), other.end(), entries.begin(), SameMemory);
}

TableCache::TableCache(std::size_t capacity, Release release) : capacity_(capacity), release_(std::move(release)) {
  if (capacity_ == 0) {
    throw ArgumentError("capacity", "must be at least 1, got 0");
  }
  if (!release_) {
    throw ArgumentNullError("release");
  }
  kept_.reserve(capacity_);
}

TableCache::~TableCache() { Clear(); }

const KeptTable* TableCache::Find(int device, std::span<const ListEntry> entries) noexcept {
  const auto it = std::find_if(kept_.begin(), kept_.end(),
                               [&](const KeptTable& kept) { return kept.key.Matches(device, entries); });
  if (it == kept_.end()) {
    return nullptr;
  }
  std::rotate(kept_.begin(), it, it + 1);
  return &kept_.front();
}

void TableCache::Insert(TableKey key, std::byte* table, std::int32_t count, std::uint64_t total) noexcept {
  const auto same = std::find_if(kept_.begin(), kept_.end(),
                                 [&](const KeptTable& kept) { return kept.key.Matches(key.device, key.entries); });
  if (same != kept_.end()) {
    release_(same->table);
    kept_.erase(same);
  } else if (kept_.size() == capacity_) {
    release_(kept_.back().table);
    kept_.pop_back();
  }
  // Never reallocates (reserved to capacity_, one slot free), and KeptTable moves without
  // throwing: nothing here can throw, so the table is owned from here on.
  kept_.insert(kept_.begin(), KeptTable{std::move(key), table, count, total});
}

void TableCache::Clear() noexcept {
  for (const KeptTable& kept : kept_) {
    release_(kept.table);
  }
  kept_.clear();
}

}  // namespace mlframework::backends::cuda
