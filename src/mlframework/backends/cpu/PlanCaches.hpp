#pragma once
// Private: the CPU backend's caches of plans, small and shared by all threads.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "mlframework/backends/cpu/ListKey.hpp"
#include "mlframework/backends/cpu/Plan.hpp"

namespace mlframework::backends::cpu {

/// The entries of a cache, most recently used first. Entries are immutable: callers compare a snapshot of them outside
/// the lock.
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

// ---- the address order of plans, kept across calls ----------------------------------------
//
// A training step hands the backend the same lists on every step (its gradients, its
// parameters), and putting a long scattered list in address order is serial work: for the
// 26,000 tensors of a 64M-element list, the sort and the joining took 800 us of a 2.2 ms check
// with 16 threads of a Xeon, and 470 us of 7.8 ms with 2 threads of an EPYC. The ordered plan is
// a function of the plan alone (addresses, dtypes, counts), so a plan equal to one ordered before
// reuses that one's result: comparing costs one pass over the two plans, and a hit can never
// differ from what the sort would give. Only lists out of address order are kept, the
// kEntries used last.

inline bool SameLayout(const Plan& a, const Plan& b) { return a.offsets == b.offsets && a.segments == b.segments; }
inline bool SameLayout(const PairPlans& a, const PairPlans& b) {
  return SameLayout(a.first, b.first) && SameLayout(a.second, b.second);
}

/// Plans is a Plan, or a PairPlans for a cast. Shared by all threads.
template <typename Plans>
class OrderCache {
 public:
  static constexpr std::size_t kEntries = 4;

  /// The ordered plans kept for @p plans, or null.
  std::shared_ptr<const Plans> Find(const Plans& plans) {
    for (const auto& entry : entries_.Snapshot()) {
      if (SameLayout(entry->plans, plans)) {
        entries_.MoveToFront(entry);
        return entry->ordered;
      }
    }
    return nullptr;
  }

  void Add(Plans plans, std::shared_ptr<const Plans> ordered) {
    entries_.Add(std::make_shared<const Entry>(Entry{std::move(plans), std::move(ordered)}), kEntries);
  }

 private:
  struct Entry {
    Plans plans;                           // as the list gave them
    std::shared_ptr<const Plans> ordered;  // the same in address order
  };

  RecentEntries<Entry> entries_;
};

// ---- the plans of lists passed again -------------------------------------------------------
//
// A training loop hands the same lists to every step: the gradients it unscales, checks and
// clips, the FP16 gradients it casts into FP32 ones, often wrapped anew in tensor objects each
// step by the framework that owns them. Planning such a list walks every tensor object,
// scattered on the heap, and builds, joins and orders the plan. A list whose ListKey (its
// memory) matches an entry's takes that entry's plan.
//
// A list that dies each step at new addresses (a cast's fresh output) would push the long-lived
// lists out, and short lists cost little to plan. So an entry is made only for lists of
// kMinTensors tensors or more (a cast's two lists together) planned a second time over the same
// memory (the fingerprints of the last kSeen lists planned are remembered), and only the kEntries
// used last are kept: a list is planned on its first two calls and takes its kept plan from the
// third on.

/// Plans is a Plan, or a PairPlans for a cast. Shared by all threads.
template <typename Plans>
class ListCache {
 public:
  static constexpr std::size_t kEntries = 4;
  static constexpr std::size_t kMinTensors = 64;
  static constexpr std::size_t kSeen = 16;

  /// The plans kept for @p lists, or null.
  std::shared_ptr<const Plans> Find(const TensorLists& lists) {
    for (const auto& entry : entries_.Snapshot()) {
      if (entry->key.Matches(lists)) {
        entries_.MoveToFront(entry);
        return entry->plans;
      }
    }
    return nullptr;
  }

  /// Called with the @p plans just made for @p lists, all CPU tensors: keeps them when the lists
  /// are long and their memory was planned before.
  void Add(const TensorLists& lists, std::shared_ptr<const Plans> plans) {
    if (lists[0].size() + lists[1].size() < kMinTensors) {
      return;
    }
    ListKey key(lists);
    if (!SeenBefore(key.Fingerprint())) {
      return;
    }
    entries_.Add(std::make_shared<const Entry>(Entry{std::move(key), std::move(plans)}), kEntries);
  }

 private:
  struct Entry {
    ListKey key;
    std::shared_ptr<const Plans> plans;
  };

  // True when @p fingerprint is one of the last kSeen planned (it is then forgotten); else
  // remembers it.
  bool SeenBefore(std::uint64_t fingerprint) {
    const std::lock_guard<std::mutex> lock(seen_mutex_);
    const auto it = std::find(seen_.begin(), seen_.end(), fingerprint);
    if (it != seen_.end()) {
      seen_.erase(it);
      return true;
    }
    seen_.insert(seen_.begin(), fingerprint);
    if (seen_.size() > kSeen) {
      seen_.pop_back();
    }
    return false;
  }

  RecentEntries<Entry> entries_;
  std::mutex seen_mutex_;
  std::vector<std::uint64_t> seen_;  // most recent first
};

}  // namespace mlframework::backends::cpu
