#pragma once
// Private: the plans of lists passed again.
//
// A training loop hands the same lists to every step: the gradients it unscales, checks and
// clips, the FP16 gradients it casts into FP32 ones. Planning such a list walks every tensor
// object, scattered on the heap, and builds, joins and orders the plan. A list whose ListKey
// matches an entry's takes that entry's plan without reading a tensor object.
//
// A list that dies each step (gradients freed and allocated again, a cast's fresh output) would
// mark tensors whose death then invalidates the lists that live on, and short lists would push
// the long ones out. So an entry is made only for lists of kMinTensors tensors or more (shorter
// ones cost little to plan) whose every tensor was planned before (a list planned again; fresh
// tensors, even at a dead one's address, are planned for the first time), and only the kEntries
// used last are kept: a list is planned on its first two calls and takes its kept plan from the
// third on.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "mlframework/backends/cpu/ListKey.hpp"
#include "mlframework/backends/cpu/RecentEntries.hpp"

namespace mlframework::backends::cpu {

/// Plans is a Plan, or a PairPlans for a cast. Shared by all threads.
template <typename Plans>
class ListCache {
 public:
  static constexpr std::size_t kEntries = 4;
  static constexpr std::size_t kMinTensors = 64;

  /// The plans kept for @p lists, or null. Entries a destroyed tensor invalidated are dropped.
  std::shared_ptr<const Plans> Find(const TensorLists& lists) {
    for (const auto& entry : entries_.Snapshot([](const Entry& e) { return !e.key.Valid(); })) {
      if (entry->key.Matches(lists)) {
        entries_.MoveToFront(entry);
        return entry->plans;
      }
    }
    return nullptr;
  }

  /// Keeps @p plans for @p lists, all CPU tensors planned before, planned again after
  /// ListKey::Generation() read @p generation, when the lists are long.
  void Add(const TensorLists& lists, std::shared_ptr<const Plans> plans, std::uint64_t generation) {
    if (lists[0].size() + lists[1].size() < kMinTensors) {
      return;
    }
    entries_.Add(std::make_shared<const Entry>(Entry{ListKey(lists, generation), std::move(plans)}), kEntries);
  }

 private:
  struct Entry {
    ListKey key;
    std::shared_ptr<const Plans> plans;
  };

  RecentEntries<Entry> entries_;
};

}  // namespace mlframework::backends::cpu
