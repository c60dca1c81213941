#include "mlframework/backends/cpu/ListKey.hpp"

#include <atomic>

#include "mlframework/backends/cpu/CpuTensorImpl.hpp"
#include "mlframework/backends/cpu/Planning.hpp"

namespace mlframework::backends::cpu {

namespace {

std::atomic<std::uint64_t> g_kept_generation{0};

}  // namespace

void KeptTensorDestroyed() noexcept { g_kept_generation.fetch_add(1, std::memory_order_acq_rel); }

std::uint64_t ListKey::Generation() noexcept { return g_kept_generation.load(std::memory_order_acquire); }

ListKey::ListKey(const TensorLists& lists, std::uint64_t generation) : generation_(generation) {
  objects_.reserve(lists[0].size() + lists[1].size());
  for (std::size_t l = 0; l < lists.size(); ++l) {
    sizes_[l] = lists[l].size();
    for (const TensorPtr& tensor : lists[l]) {
      static_cast<const CpuTensor&>(*tensor).MarkKept();
      objects_.push_back(tensor.get());
    }
  }
}

bool ListKey::Valid() const noexcept { return Generation() == generation_; }

bool ListKey::Matches(const TensorLists& lists) const {
  if (lists[0].size() != sizes_[0] || lists[1].size() != sizes_[1] || !Valid()) {
    return false;
  }
  std::size_t first = 0;  // where list l starts in objects_
  for (const std::span<const TensorPtr> list : lists) {
    const std::size_t count = list.size();
    // Another list of the same length (fresh gradients each step) differs at its ends.
    if (count > 0 && (objects_[first] != list.front().get() || objects_[first + count - 1] != list.back().get())) {
      return false;
    }
    int other = 0;
#pragma omp parallel for schedule(static) reduction(| : other) if (PlanInParallel(count))
    for (std::size_t i = 0; i < count; ++i) {
      other |= objects_[first + i] != list[i].get() ? 1 : 0;
    }
    if (other != 0) {
      return false;
    }
    first += count;
  }
  return true;
}

}  // namespace mlframework::backends::cpu
