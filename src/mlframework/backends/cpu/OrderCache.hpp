#pragma once
// Private: the address order of plans, kept across calls.
//
// A training step hands the backend the same lists on every step (its gradients, its
// parameters), and putting a long scattered list in address order is serial work: for the
// 26,000 tensors of a 64M-element list, the sort and the joining took 800 us of a 2.2 ms check
// with 16 threads of a Xeon, and 470 us of 7.8 ms with 2 threads of an EPYC. The ordered plan is
// a function of the plan alone (addresses, dtypes, counts), so a plan equal to one ordered before
// reuses that one's result: comparing costs one pass over the two plans, and a hit can never
// differ from what the sort would give. Only lists out of address order are kept, the
// kOrderCacheEntries used last.

#include <cstddef>
#include <memory>
#include <utility>

#include "mlframework/backends/cpu/Plan.hpp"
#include "mlframework/backends/cpu/RecentEntries.hpp"

namespace mlframework::backends::cpu {

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

}  // namespace mlframework::backends::cpu
