#pragma once
// Private: the entries of a small cache shared by all threads, most recently used first.

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace mlframework::backends::cpu {

/// Entries are immutable: callers compare a snapshot of them outside the lock.
template <typename Entry>
class RecentEntries {
 public:
  using Pointer = std::shared_ptr<const Entry>;

  /// The entries, after dropping those for which @p stale is true.
  template <typename Stale>
  std::vector<Pointer> Snapshot(Stale&& stale) {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(entries_, [&](const Pointer& entry) { return stale(*entry); });
    return entries_;
  }
  std::vector<Pointer> Snapshot() {
    return Snapshot([](const Entry&) { return false; });
  }

  void MoveToFront(const Pointer& entry) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = std::find(entries_.begin(), entries_.end(), entry);
    if (it != entries_.end()) {
      std::rotate(entries_.begin(), it, it + 1);
    }
  }

  /// Adds @p entry first, dropping the least recently used beyond @p capacity.
  void Add(Pointer entry, std::size_t capacity) {
    const std::lock_guard<std::mutex> lock(mutex_);
    entries_.insert(entries_.begin(), std::move(entry));
    if (entries_.size() > capacity) {
      entries_.pop_back();
    }
  }

 private:
  std::mutex mutex_;
  std::vector<Pointer> entries_;
};

}  // namespace mlframework::backends::cpu
