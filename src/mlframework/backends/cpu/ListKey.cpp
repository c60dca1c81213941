#include "mlframework/backends/cpu/ListKey.hpp"

#include "mlframework/backends/cpu/CpuTensorImpl.hpp"
#include "mlframework/backends/cpu/Planning.hpp"

namespace mlframework::backends::cpu {

namespace {

// True when the shapes of a cast's source and destination of equal counts are equal: the count
// is the shape for rank 0 and 1, so only higher ranks read the shapes' elements.
bool SameShape(const CpuTensor& a, const CpuTensor& b) {
  const Shape& x = a.GetShape();
  const Shape& y = b.GetShape();
  return x.size() == y.size() && (x.size() <= 1 || x == y);
}

// The dynamic type of the lists' first tensor.
const std::type_info& TypeOf(const TensorLists& lists) {
  const ITensor& first = *(lists[0].empty() ? lists[1] : lists[0]).front();
  return typeid(first);
}

}  // namespace

ListKey::ListKey(const TensorLists& lists) : type_(&TypeOf(lists)) {
  memory_.reserve(lists[0].size() + lists[1].size());
  objects_.reserve(lists[0].size() + lists[1].size());
  for (std::size_t l = 0; l < lists.size(); ++l) {
    sizes_[l] = lists[l].size();
    for (const TensorPtr& tensor : lists[l]) {
      const auto& cpu = static_cast<const CpuTensor&>(*tensor);
      cpu.MarkKept();
      objects_.push_back(&cpu);
      memory_.push_back({cpu.Data(), cpu.Size(), cpu.GetDataType()});
    }
  }
  // Read after marking: a kept tensor destroyed from here on is seen by Matches().
  generation_ = KeptGeneration();
}

bool ListKey::SameObjects(const TensorLists& lists) const noexcept {
  std::size_t k = 0;
  for (const std::span<const TensorPtr> list : lists) {
    for (const TensorPtr& tensor : list) {
      if (tensor.get() != objects_[k++]) {
        return false;
      }
    }
  }
  return true;
}

bool ListKey::Matches(const TensorLists& lists) const {
  if (lists[0].size() != sizes_[0] || lists[1].size() != sizes_[1]) {
    return false;
  }
  if (KeptGeneration() == generation_ && SameObjects(lists)) {
    return true;  // the same live objects: the same memory, shapes included (see ListKey.hpp)
  }
  // The CpuTensor at an entry over the key's memory at @p k, or null.
  const auto same = [&](const TensorPtr& entry, std::size_t k) -> const CpuTensor* {
    const ITensor* tensor = entry.get();
    if (tensor == nullptr || typeid(*tensor) != *type_) {
      return nullptr;
    }
    const auto& cpu = static_cast<const CpuTensor&>(*tensor);
    return memory_[k] == Memory{cpu.Data(), cpu.Size(), cpu.GetDataType()} ? &cpu : nullptr;
  };
  const bool pairs = sizes_[1] != 0 && sizes_[0] == sizes_[1];
  std::size_t first = 0;  // where list l starts in memory_
  for (const std::span<const TensorPtr> list : lists) {
    const std::size_t count = list.size();
    // Another list of the same length (fresh gradients each step) differs at its ends.
    if (count > 0 && (same(list.front(), first) == nullptr || same(list.back(), first + count - 1) == nullptr)) {
      return false;
    }
    first += count;
  }
  const std::size_t count = lists[0].size();
  int other = 0;
#pragma omp parallel for schedule(static) reduction(|        \
                                                    : other) \
    num_threads(mlframework::NumThreads()) if (PlanInParallel(count))
  for (std::size_t i = 0; i < count; ++i) {
    const CpuTensor* in = same(lists[0][i], i);
    if (!pairs) {
      other |= in == nullptr ? 1 : 0;
      continue;
    }
    const CpuTensor* out = same(lists[1][i], count + i);
    other |= in == nullptr || out == nullptr || !SameShape(*in, *out) ? 1 : 0;
  }
  if (other != 0) {
    return false;
  }
  // A second list of another length (never a cast's) is compared on its own.
  if (!pairs) {
    for (std::size_t i = 0; i < lists[1].size(); ++i) {
      if (same(lists[1][i], count + i) == nullptr) {
        return false;
      }
    }
  }
  return true;
}

std::uint64_t ListKey::Fingerprint() const noexcept {
  // FNV-1a over the words of the key: a collision only lets a list be kept a call early
  // (ListCache), never a plan be used for other memory (Matches compares the whole key).
  std::uint64_t hash = 14695981039346656037ULL;
  const auto mix = [&](std::uint64_t word) {
    hash ^= word;
    hash *= 1099511628211ULL;
  };
  mix(sizes_[0]);
  mix(sizes_[1]);
  for (const Memory& m : memory_) {
    mix(reinterpret_cast<std::uintptr_t>(m.data));
    mix(m.size);
    mix(static_cast<std::uint64_t>(m.dtype));
  }
  return hash;
}

}  // namespace mlframework::backends::cpu
