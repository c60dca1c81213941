#include "mlframework/backends/cpu/MultiTensorKernels.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <omp.h>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/HostScaling.hpp>

#include "mlframework/backends/cpu/CpuTensorImpl.hpp"
#include "mlframework/backends/cpu/KernelTable.hpp"
#include "mlframework/backends/cpu/ScalarElements.hpp"
#include "mlframework/core/TensorListWalk.hpp"

namespace mlframework::backends::cpu {

using scalar::DispatchDtype;

// ---- chunk plan --------------------------------------------------------------------------

struct Segment {
  std::byte* data;
  DataType dtype;

  void* At(std::size_t element) const { return data + element * ElementSize(dtype); }
  bool operator==(const Segment&) const = default;
};

namespace {

// The CpuTensor behind a tensor handed to this backend. The front-ends pass only tensors whose
// Backend() is this one, which are CpuTensors (a final class): one virtual call per tensor
// instead of a dynamic_cast and three more virtual calls, which showed in lists of thousands
// of small tensors. Anything else gets the checked accessor's clear error.
const CpuTensor& AsCpuTensor(const ITensor& tensor, const TensorBackend* self) {
  if (tensor.Backend() != self) {
    (void)Data(tensor);  // throws ArgumentError naming the tensor's device
  }
  return static_cast<const CpuTensor&>(tensor);
}

using mlframework::detail::kObjectPrefetchAhead;

}  // namespace

// A list as one virtual array of segments. Tensors that lie back to back in memory (a
// ZerosContiguous() list, a flat gradient buffer) are joined into one segment: the element
// loops are per element, so a run of adjacent tensors of one dtype is one piece of memory to
// them, streamed without a call, a head and a tail per tensor. Only exact adjacency joins: a gap
// may hold memory that is not in the list.
struct Plan {
  std::vector<Segment> segments;
  std::vector<std::size_t> offsets;  // where each segment starts in the virtual array; then total
  std::size_t total = 0;
  std::size_t bytes = 0;
  std::size_t chunks = 0;

  Plan() = default;
  explicit Plan(std::size_t tensors) {
    segments.reserve(tensors);
    offsets.reserve(tensors + 1);
  }

  // True when memory at @p data in @p dtype starts exactly where the last segment ends.
  bool Continues(const void* data, DataType dtype) const {
    return !segments.empty() && segments.back().dtype == dtype && segments.back().At(total - offsets.back()) == data;
  }
  bool Continues(const CpuTensor& tensor) const { return Continues(tensor.Data(), tensor.GetDataType()); }
  // True when the first segment of @p part, the plan of the tensors that follow, continues the last one.
  bool ContinuedBy(const Plan& part) const {
    return !part.segments.empty() && Continues(part.segments.front().data, part.segments.front().dtype);
  }

  // Adds @p count elements at @p segment, as a new segment or (when @p join) as the
  // continuation of the last one.
  void Append(const Segment& segment, std::size_t count, bool join) {
    if (!join) {
      offsets.push_back(total);
      segments.push_back(segment);
    }
    total += count;
    bytes += count * ElementSize(segment.dtype);
  }
  void Append(const CpuTensor& tensor, bool join) {
    Append(Segment{static_cast<std::byte*>(const_cast<void*>(tensor.Data())), tensor.GetDataType()}, tensor.Size(),
           join);
  }

  // Elements of segment s.
  std::size_t Count(std::size_t s) const { return offsets[s + 1] - offsets[s]; }

  // Appends @p part, the unfinished plan of the tensors that follow; its first segment becomes
  // part of the last one when @p join. The result is the plan one pass over all would make.
  void Append(const Plan& part, bool join) {
    for (std::size_t s = join ? 1 : 0; s < part.segments.size(); ++s) {
      offsets.push_back(total + part.offsets[s]);
      segments.push_back(part.segments[s]);
    }
    total += part.total;
    bytes += part.bytes;
  }

  void Finish() {
    offsets.push_back(total);
    chunks = (total + kChunkElements - 1) / kChunkElements;
  }

  // Calls fn(segment, begin, end) for each piece of chunk c, in order.
  template <typename Fn>
  void ForEachPiece(std::size_t chunk, Fn&& fn) const {
    const std::size_t begin = chunk * kChunkElements;
    const std::size_t end = std::min(total, begin + kChunkElements);
    auto it = std::upper_bound(offsets.begin(), offsets.end(), begin);
    std::size_t s = static_cast<std::size_t>(it - offsets.begin()) - 1;
    for (std::size_t pos = begin; pos < end; ++s) {
      const std::size_t seg_end = std::min(end, offsets[s + 1]);
      if (seg_end > pos) {
        fn(s, pos - offsets[s], seg_end - offsets[s]);
      }
      pos = std::max(pos, seg_end);
    }
  }
};

namespace {

// Thrown by the walk of the front end's fast path (PlanOfList) at a null tensor or one of
// another backend: the front end then takes its general path, which reports or groups those.
struct NotCpuList {};

// The CpuTensor at one entry of a list: of a backend call (a foreign tensor is an error), or of
// the front end's fast path (NotCpuList).
const CpuTensor& CpuTensorAt(const ITensor* tensor, const TensorBackend* self) { return AsCpuTensor(*tensor, self); }
const CpuTensor& CpuTensorAt(const TensorPtr& tensor, const TensorBackend* self) {
  if (!tensor || tensor->Backend() != self) {
    throw NotCpuList{};
  }
  return static_cast<const CpuTensor&>(*tensor);
}
const ITensor* Raw(const ITensor* tensor) { return tensor; }
const ITensor* Raw(const TensorPtr& tensor) { return tensor.get(); }

// Long lists are planned on every thread (kParallelWalkTensors).
bool PlanInParallel(std::size_t tensors) {
  return tensors >= mlframework::detail::kParallelWalkTensors && omp_get_max_threads() > 1;
}

// plan_range(first, last) over contiguous ranges of [0, count), one a thread, in list order.
// An exception must not leave the OpenMP region: the first one in list order is rethrown after it.
template <typename Part, typename PlanRange>
std::vector<Part> PlanInParts(std::size_t count, const PlanRange& plan_range) {
  const int max_threads = omp_get_max_threads();
  std::vector<Part> parts(static_cast<std::size_t>(max_threads));
  std::vector<std::exception_ptr> errors(parts.size());
#pragma omp parallel num_threads(max_threads)
  {
    const auto threads = static_cast<std::size_t>(omp_get_num_threads());
    const auto t = static_cast<std::size_t>(omp_get_thread_num());
    try {
      parts[t] = plan_range(count * t / threads, count * (t + 1) / threads);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  }
  for (const std::exception_ptr& error : errors) {
    if (error) {
      std::rethrow_exception(error);
    }
  }
  return parts;
}

// Set by a planning walk that met a tensor planned for the first time (CpuTensor::MarkPlanned):
// such a list is not kept (see ListCache).
using FirstPlanning = std::atomic<bool>;

// Marks @p tensor planned, and sets @p first_planning when this is its first planning.
void MarkPlanned(const CpuTensor& tensor, FirstPlanning* first_planning) {
  if (!tensor.MarkPlanned() && first_planning != nullptr) {
    first_planning->store(true, std::memory_order_relaxed);
  }
}

// The plan of one list.
template <typename TensorPointer>
Plan MakePlan(std::span<TensorPointer const> tensors, FirstPlanning* first_planning = nullptr) {
  const TensorBackend* self = &Backend();
  const auto plan_range = [&](std::size_t first, std::size_t last) {
    Plan part(last - first);
    for (std::size_t i = first; i < last; ++i) {
      if (i + kObjectPrefetchAhead < tensors.size()) {
        __builtin_prefetch(Raw(tensors[i + kObjectPrefetchAhead]));  // see kObjectPrefetchAhead
      }
      const CpuTensor& tensor = CpuTensorAt(tensors[i], self);
      MarkPlanned(tensor, first_planning);
      part.Append(tensor, part.Continues(tensor));
    }
    return part;
  };
  Plan plan;
  if (!PlanInParallel(tensors.size())) {
    plan = plan_range(0, tensors.size());
  } else {
    plan = Plan(tensors.size());
    for (const Plan& part : PlanInParts<Plan>(tensors.size(), plan_range)) {
      plan.Append(part, plan.ContinuedBy(part));
    }
  }
  plan.Finish();
  return plan;
}

// The plans of a source and a destination list of the same sizes: a pair of tensors joins the
// previous pair only when both sides do, so segment s of one plan matches segment s of the other.
template <typename SrcPointer, typename DstPointer>
std::pair<Plan, Plan> MakePairPlans(std::span<SrcPointer const> src, std::span<DstPointer const> dst,
                                    FirstPlanning* first_planning = nullptr) {
  const TensorBackend* self = &Backend();
  const auto plan_range = [&](std::size_t first, std::size_t last) {
    std::pair<Plan, Plan> part{Plan(last - first), Plan(last - first)};
    for (std::size_t i = first; i < last; ++i) {
      if (i + kObjectPrefetchAhead < src.size()) {
        __builtin_prefetch(Raw(src[i + kObjectPrefetchAhead]));
        __builtin_prefetch(Raw(dst[i + kObjectPrefetchAhead]));
      }
      const CpuTensor& in = CpuTensorAt(src[i], self);
      const CpuTensor& out = CpuTensorAt(dst[i], self);
      MarkPlanned(in, first_planning);
      MarkPlanned(out, first_planning);
      const bool join = part.first.Continues(in) && part.second.Continues(out);
      part.first.Append(in, join);
      part.second.Append(out, join);
    }
    return part;
  };
  std::pair<Plan, Plan> plans;
  if (!PlanInParallel(src.size())) {
    plans = plan_range(0, src.size());
  } else {
    plans = {Plan(src.size()), Plan(dst.size())};
    for (const auto& part : PlanInParts<std::pair<Plan, Plan>>(src.size(), plan_range)) {
      const bool join = plans.first.ContinuedBy(part.first) && plans.second.ContinuedBy(part.second);
      plans.first.Append(part.first, join);
      plans.second.Append(part.second, join);
    }
  }
  plans.first.Finish();
  plans.second.Finish();
  return plans;
}

// ---- address order -----------------------------------------------------------------------
//
// A list's order says nothing about where its tensors lie: gradients are often allocated in
// the backward pass, last layer first, and a GradientMap lists them by name. Streaming
// separately allocated tensors from memory in descending address order ran 1.1-2.3x slower
// than in ascending order on an EPYC host (docs/BENCHMARKS.md, session 11): each tensor's lines
// are a new stream to the hardware prefetcher, and the software prefetch past a tensor's end
// finds the next tensor only when that one lies above it. So every operation visits a long list
// from memory in address order. The element-wise results and the non-finite flag do not depend
// on the order. The sum of squares does, in its last bits: where its FP32 partials are cut
// already depends on the layout (tensors joined because they lie back to back), and now also on
// the order in memory. For one list in one layout it is the same on every call and for every
// thread count.

// Sorts (address, index) pairs by address, stably: a least-significant-digit radix sort over the
// span the addresses cover, 11 bits a pass (three passes for a span below 8 GiB). For the 26,000
// scattered tensors of a 64M-element list it took 150 us, against 700 us for std::sort and 490 us
// for Boost's spreadsort integer_sort (docs/BENCHMARKS.md, session 11): the sort is paid on every
// call, and it must stay well below what the address order gains.
void SortByAddress(std::vector<std::pair<std::uintptr_t, std::size_t>>& keyed) {
  constexpr unsigned kDigitBits = 11;
  constexpr std::size_t kBuckets = std::size_t{1} << kDigitBits;
  const auto [low, high] = std::minmax_element(keyed.begin(), keyed.end());
  const std::uintptr_t base = low->first;
  const std::uintptr_t span = high->first - base;
  std::vector<std::pair<std::uintptr_t, std::size_t>> sorted(keyed.size());
  for (unsigned shift = 0; shift < 64 && (span >> shift) != 0; shift += kDigitBits) {
    const auto digit = [&](std::uintptr_t address) { return ((address - base) >> shift) & (kBuckets - 1); };
    std::array<std::size_t, kBuckets> start{};
    for (const auto& key : keyed) {
      ++start[digit(key.first)];
    }
    std::size_t sum = 0;
    for (std::size_t& count : start) {
      sum += std::exchange(count, sum);
    }
    for (const auto& key : keyed) {
      sorted[start[digit(key.first)]++] = key;
    }
    keyed.swap(sorted);
  }
}

// True when the segments of @p plan lie in ascending address order (the common case of a list
// allocated in order, and of one segment).
bool InAddressOrder(const Plan& plan) {
  const auto above = [](const Segment& a, const Segment& b) {
    return reinterpret_cast<std::uintptr_t>(b.data) < reinterpret_cast<std::uintptr_t>(a.data);
  };
  return std::adjacent_find(plan.segments.begin(), plan.segments.end(), above) == plan.segments.end();
}

// The segments of @p plan in ascending address order, as a permutation.
std::vector<std::size_t> AddressOrder(const Plan& plan) {
  const std::vector<Segment>& segments = plan.segments;
  std::vector<std::pair<std::uintptr_t, std::size_t>> keyed(segments.size());
  for (std::size_t s = 0; s < segments.size(); ++s) {
    keyed[s] = {reinterpret_cast<std::uintptr_t>(segments[s].data), s};
  }
  SortByAddress(keyed);
  std::vector<std::size_t> order(keyed.size());
  for (std::size_t s = 0; s < keyed.size(); ++s) {
    order[s] = keyed[s].second;
  }
  return order;
}

// @p plan with its segments in @p order, joined where they now lie back to back.
Plan Reordered(const Plan& plan, const std::vector<std::size_t>& order) {
  Plan result(plan.segments.size());
  for (const std::size_t s : order) {
    result.Append(plan.segments[s], plan.Count(s), result.Continues(plan.segments[s].data, plan.segments[s].dtype));
  }
  result.Finish();
  return result;
}

// The same for a source and a destination plan, in the source's address order: a pair joins
// only when both sides continue, so segment s of one still matches segment s of the other.
std::pair<Plan, Plan> Reordered(const std::pair<Plan, Plan>& plans, const std::vector<std::size_t>& order) {
  std::pair<Plan, Plan> result{Plan(plans.first.segments.size()), Plan(plans.first.segments.size())};
  for (const std::size_t s : order) {
    const Segment& in = plans.first.segments[s];
    const Segment& out = plans.second.segments[s];
    const bool join = result.first.Continues(in.data, in.dtype) && result.second.Continues(out.data, out.dtype);
    result.first.Append(in, plans.first.Count(s), join);
    result.second.Append(out, plans.second.Count(s), join);
  }
  result.first.Finish();
  result.second.Finish();
  return result;
}

// ---- the address order, kept across calls -------------------------------------------------
//
// A training step hands the backend the same lists on every step (its gradients, its
// parameters), and putting a long scattered list in address order is serial work. For the
// 26,000 tensors of a 64M-element list, the sort and the joining took 800 us of a 2.2 ms check
// with 16 threads of a Xeon, and 470 us of 7.8 ms with 2 threads of an EPYC (docs/BENCHMARKS.md,
// session 12). The ordered plan is a function of the plan alone (addresses, dtypes, counts), so
// a plan equal to one ordered before reuses that one's result: comparing costs one pass over the
// two plans, and a hit can never differ from what the sort would give. Only lists out of address
// order are kept, the kOrderCacheEntries used last, in one cache for single lists and one for
// casts (a source and a destination list).
constexpr std::size_t kOrderCacheEntries = 4;

bool SameLayout(const Plan& a, const Plan& b) { return a.offsets == b.offsets && a.segments == b.segments; }
bool SameLayout(const std::pair<Plan, Plan>& a, const std::pair<Plan, Plan>& b) {
  return SameLayout(a.first, b.first) && SameLayout(a.second, b.second);
}

// The entries of a cache shared by all threads, most recently used first. Entries are
// immutable: callers compare a snapshot of them outside the lock.
template <typename Entry>
class RecentEntries {
 public:
  using Pointer = std::shared_ptr<const Entry>;

  // The entries, after dropping those for which @p stale is true.
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

  // Adds @p entry first, dropping the least recently used beyond @p capacity.
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

// Plans is a Plan, or a source and destination pair of them for a cast. Shared by all threads:
// the entries are immutable and compared outside the lock.
template <typename Plans>
class OrderCache {
 public:
  // The ordered plans kept for @p plans, or null.
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
    entries_.Add(std::make_shared<const Entry>(Entry{std::move(plans), std::move(ordered)}), kOrderCacheEntries);
  }

 private:
  struct Entry {
    Plans plans;                           // as the list gave them
    std::shared_ptr<const Plans> ordered;  // the same in address order
  };

  RecentEntries<Entry> entries_;
};

const Plan& OrderKey(const Plan& plan) { return plan; }
const Plan& OrderKey(const std::pair<Plan, Plan>& plans) { return plans.first; }  // a cast: by its source

// @p plans in address order (by the source for a cast), from @p cache when it holds them.
template <typename Plans>
std::shared_ptr<const Plans> OrderedByAddress(Plans plans, OrderCache<Plans>& cache) {
  if (InAddressOrder(OrderKey(plans))) {
    return std::make_shared<const Plans>(std::move(plans));
  }
  if (std::shared_ptr<const Plans> ordered = cache.Find(plans)) {
    return ordered;
  }
  auto ordered = std::make_shared<const Plans>(Reordered(plans, AddressOrder(OrderKey(plans))));
  cache.Add(std::move(plans), ordered);
  return ordered;
}

// True when a call over @p bytes streams from memory (kFromMemoryBytes): it runs the from_memory
// kernels, and visiting its tensors in address order pays for the sort.
bool FromMemory(std::size_t bytes) { return bytes >= kFromMemoryBytes; }

// One cache for the lists of every operation: a step unscales, checks and clips the same list.
OrderCache<Plan>& ListOrderCache() {
  static OrderCache<Plan> cache;
  return cache;
}

// The plan of an operation over @p tensors: in address order from memory.
template <typename TensorPointer>
std::shared_ptr<const Plan> MakeOrderedPlan(std::span<TensorPointer const> tensors,
                                            FirstPlanning* first_planning = nullptr) {
  Plan plan = MakePlan(tensors, first_planning);
  if (!FromMemory(plan.bytes)) {
    return std::make_shared<const Plan>(std::move(plan));
  }
  return OrderedByAddress(std::move(plan), ListOrderCache());
}

// The plans of a cast, in the source's address order from memory (source and destination
// bytes together, as KernelsFor counts them).
template <typename SrcPointer, typename DstPointer>
std::shared_ptr<const std::pair<Plan, Plan>> MakeOrderedPairPlans(std::span<SrcPointer const> src,
                                                                  std::span<DstPointer const> dst,
                                                                  FirstPlanning* first_planning = nullptr) {
  static OrderCache<std::pair<Plan, Plan>> cache;
  std::pair<Plan, Plan> plans = MakePairPlans(src, dst, first_planning);
  if (!FromMemory(plans.first.bytes + plans.second.bytes)) {
    return std::make_shared<const std::pair<Plan, Plan>>(std::move(plans));
  }
  return OrderedByAddress(std::move(plans), cache);
}

// ---- lists passed again ------------------------------------------------------------------
//
// A training loop hands the same lists to every step: the gradients it unscales, checks and
// clips, the FP16 gradients it casts into FP32 ones. Planning such a list walks every tensor
// object, scattered on the heap, and builds, joins and orders the plan. A CpuTensor never
// changes its data pointer, size, dtype or shape, so a list that holds the same tensor objects
// in the same order as an earlier call, all still alive, has that call's plan.
//
// An entry keeps the list's object pointers and is valid only while no tensor that any entry
// held has been destroyed since the entry was made: each tensor an entry holds is marked
// (CpuTensor::MarkKept), and destroying a marked tensor advances g_kept_generation, which
// invalidates every entry made before. While an entry is valid, each of its pointers still
// names the live tensor it named, so a list with the same pointers is that list. Comparing reads
// the caller's array of shared_ptrs and the entry's array of pointers, in order; no tensor object
// is read. Nothing is kept alive: an earlier version kept a weak_ptr per tensor, and the control
// blocks it held after lists died scattered the next lists' tensors further on the heap.
//
// A list that dies each step (gradients freed and allocated again, a cast's fresh output) would
// mark tensors whose death then invalidates the lists that live on, and short lists would push
// the long ones out. So an entry is made only for lists of kMinKeptTensors tensors or more
// (shorter ones cost little to plan) whose every tensor was planned before (a list planned
// again; fresh tensors, even at a dead one's address, are planned for the first time), and
// only the kListCacheEntries used last are kept.
constexpr std::size_t kListCacheEntries = 4;
constexpr std::size_t kMinKeptTensors = 64;

std::atomic<std::uint64_t> g_kept_generation{0};

// The tensors of one call as the front end holds them: one list (the second empty), or a
// cast's source and destination.
using TensorLists = std::array<std::span<const TensorPtr>, 2>;

template <typename Plans>
class ListCache {
 public:
  // The plans kept for @p lists, or null.
  std::shared_ptr<const Plans> Find(const TensorLists& lists) {
    // Entries a destroyed tensor invalidated are dropped here.
    const std::uint64_t generation = g_kept_generation.load(std::memory_order_acquire);
    for (const auto& entry : entries_.Snapshot([&](const Entry& e) { return e.generation != generation; })) {
      if (entry->Holds(lists)) {
        entries_.MoveToFront(entry);
        return entry->plans;
      }
    }
    return nullptr;
  }

  // Keeps @p plans for @p lists, all CPU tensors planned before, planned again after
  // g_kept_generation read @p generation, when the lists are long.
  void Add(const TensorLists& lists, std::shared_ptr<const Plans> plans, std::uint64_t generation) {
    if (lists[0].size() + lists[1].size() < kMinKeptTensors) {
      return;
    }
    entries_.Add(std::make_shared<const Entry>(lists, std::move(plans), generation), kListCacheEntries);
  }

 private:
  struct Entry {
    Entry(const TensorLists& lists, std::shared_ptr<const Plans> kept, std::uint64_t made)
        : generation(made), plans(std::move(kept)) {
      for (std::size_t l = 0; l < lists.size(); ++l) {
        sizes[l] = lists[l].size();
        for (const TensorPtr& tensor : lists[l]) {
          static_cast<const CpuTensor&>(*tensor).MarkKept();
          objects.push_back(tensor.get());
        }
      }
    }

    // True when @p lists hold exactly this entry's tensors, in order, and none it held has died.
    bool Holds(const TensorLists& lists) const {
      if (lists[0].size() != sizes[0] || lists[1].size() != sizes[1] ||
          g_kept_generation.load(std::memory_order_acquire) != generation) {
        return false;
      }
      std::size_t first = 0;  // where list l starts in objects
      for (const std::span<const TensorPtr> list : lists) {
        const std::size_t count = list.size();
        // Another list of the same length (fresh gradients each step) differs at its ends.
        if (count > 0 && (objects[first] != list.front().get() || objects[first + count - 1] != list.back().get())) {
          return false;
        }
        int other = 0;
#pragma omp parallel for schedule(static) reduction(| : other) if (PlanInParallel(count))
        for (std::size_t i = 0; i < count; ++i) {
          other |= objects[first + i] != list[i].get() ? 1 : 0;
        }
        if (other != 0) {
          return false;
        }
        first += count;
      }
      return true;
    }

    std::uint64_t generation;  // g_kept_generation before the lists were planned
    std::array<std::size_t, 2> sizes{};
    std::vector<const ITensor*> objects;  // the lists' tensors, one list after the other
    std::shared_ptr<const Plans> plans;
  };

  RecentEntries<Entry> entries_;
};

// The kernels for a call over @p bytes of memory (see kFromMemoryBytes).
const KernelSet& KernelsFor(std::size_t bytes) {
  return FromMemory(bytes) ? FromMemoryKernels() : ActiveKernels().cached;
}

// Threads only when there is more than one chunk: a fork costs more than a small list.
bool Parallel(const Plan& plan) { return plan.chunks > 1 && omp_get_max_threads() > 1; }

// ---- one piece = one function pointer call ------------------------------------------------

// FP64 sum of squares of a piece, for the rare piece whose FP32 partial overflowed
// although every element is finite (elements above about 1e19).
double SumSquaresFp64(const void* data, DataType dtype, std::size_t count) {
  return DispatchDtype(dtype, [&]<DataType D>() {
    double sum = 0.0;
    for (std::size_t i = 0; i < count; ++i) {
      const double v = scalar::Load<D>(data, i);
      sum += v * v;
    }
    return sum;
  });
}

}  // namespace

bool UnscaleAndCheckKernel(const Plan& plan, float factor) {
  const KernelSet& kernels = KernelsFor(plan.bytes);
  int found = 0;
#pragma omp parallel for schedule(static) reduction(| : found) if (Parallel(plan))
  for (std::size_t c = 0; c < plan.chunks; ++c) {
    plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      const Segment& seg = plan.segments[s];
      found |= kernels.unscale[Slot(seg.dtype)](seg.At(begin), end - begin, factor) ? 1 : 0;
    });
  }
  return found != 0;
}

bool HasNonFiniteKernel(const Plan& plan) {
  const KernelSet& kernels = KernelsFor(plan.bytes);
  std::atomic<bool> found{false};
#pragma omp parallel for schedule(static) if (Parallel(plan))
  for (std::size_t c = 0; c < plan.chunks; ++c) {
    if (found.load(std::memory_order_relaxed)) {
      continue;  // early exit: the rest of the chunks are skipped
    }
    plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      const Segment& seg = plan.segments[s];
      if (kernels.non_finite[Slot(seg.dtype)](seg.At(begin), end - begin)) {
        found.store(true, std::memory_order_relaxed);
      }
    });
  }
  return found.load();
}

NonFiniteAndNorm CheckAndSumSquaresKernel(const Plan& plan, float factor) {
  const KernelSet& kernels = KernelsFor(plan.bytes);
  // One partial per chunk (FP32 sums of its pieces, added in FP64), the partials summed
  // in FP64 in chunk order: the result does not depend on the thread count.
  std::vector<double> partials(plan.chunks, 0.0);
  int found = 0;
#pragma omp parallel for schedule(static) reduction(| : found) if (Parallel(plan))
  for (std::size_t c = 0; c < plan.chunks; ++c) {
    double chunk_sum = 0.0;
    plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      const Segment& seg = plan.segments[s];
      const void* first = seg.At(begin);
      const float piece = kernels.sum_squares[Slot(seg.dtype)](first, end - begin);
      if (detail::IsFiniteFloat(piece)) {
        // A finite sum of squares proves every element finite: the check costs nothing.
        chunk_sum += static_cast<double>(piece);
      } else if (kernels.non_finite[Slot(seg.dtype)](first, end - begin)) {
        found = 1;
        chunk_sum += static_cast<double>(piece);
      } else {
        chunk_sum += SumSquaresFp64(first, seg.dtype, end - begin);
      }
    });
    partials[c] = chunk_sum;
  }
  double total = 0.0;
  for (const double p : partials) {
    total += p;
  }
  const double f = factor;
  return NonFiniteAndNorm{found != 0, total * f * f};
}

void ScaleKernel(const Plan& plan, float factor) {
  const KernelSet& kernels = KernelsFor(plan.bytes);
#pragma omp parallel for schedule(static) if (Parallel(plan))
  for (std::size_t c = 0; c < plan.chunks; ++c) {
    plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      const Segment& seg = plan.segments[s];
      kernels.scale[Slot(seg.dtype)](seg.At(begin), end - begin, factor);
    });
  }
}

namespace {

// The cast along a source plan and a destination plan cut alike (MakePairPlans).
bool CastPairPlans(const std::pair<Plan, Plan>& plans, float factor) {
  const Plan& src_plan = plans.first;   // named references, not a structured binding: clang 14
  const Plan& dst_plan = plans.second;  // cannot capture those in the OpenMP region's lambda
  // A destination that comes with more memory than the caches hold will be evicted before anyone
  // reads it: the from_memory casts write it with non-temporal stores, which also skip reading
  // the old lines in first.
  const std::size_t bytes = src_plan.bytes + dst_plan.bytes;
  const auto& cast = KernelsFor(bytes).cast;
  const bool streaming = FromMemory(bytes);
  int found = 0;
#pragma omp parallel for schedule(static) reduction(| : found) if (Parallel(src_plan))
  for (std::size_t c = 0; c < src_plan.chunks; ++c) {
    src_plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      const Segment& in = src_plan.segments[s];
      const Segment& out = dst_plan.segments[s];
      found |= cast[Slot(in.dtype)][Slot(out.dtype)](in.At(begin), out.At(begin), end - begin, factor) ? 1 : 0;
    });
    if (streaming) {
      // Non-temporal stores are weakly ordered: a full fence (MFENCE on x86) makes this
      // chunk's visible before any thread reads it. Once per chunk, not once per tensor.
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
  }
  return found != 0;
}

}  // namespace

bool UnscaleAndCheckKernel(std::span<ITensor* const> tensors, float factor) {
  return UnscaleAndCheckKernel(*MakeOrderedPlan(tensors), factor);
}

bool HasNonFiniteKernel(std::span<const ITensor* const> tensors) {
  return HasNonFiniteKernel(*MakeOrderedPlan(tensors));
}

NonFiniteAndNorm CheckAndSumSquaresKernel(std::span<const ITensor* const> tensors, float factor) {
  return CheckAndSumSquaresKernel(*MakeOrderedPlan(tensors), factor);
}

void ScaleKernel(std::span<ITensor* const> tensors, float factor) { ScaleKernel(*MakeOrderedPlan(tensors), factor); }

bool CastIntoKernel(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float factor) {
  // Same sizes pairwise (checked by the caller), so the same segments and chunks.
  return CastPairPlans(*MakeOrderedPairPlans(src, dst), factor);
}

namespace {

// One cache for the lists of every operation: a step unscales, checks and clips the same list.
ListCache<Plan>& SingleListCache() {
  static ListCache<Plan> cache;
  return cache;
}

ListCache<std::pair<Plan, Plan>>& PairListCache() {
  static ListCache<std::pair<Plan, Plan>> cache;
  return cache;
}

// True when @p tensor is a CPU tensor: a list that starts with another kind is not walked.
bool IsCpuTensor(const TensorPtr& tensor) { return tensor && tensor->Backend() == &Backend(); }

}  // namespace

void KeptTensorDestroyed() noexcept { g_kept_generation.fetch_add(1, std::memory_order_acq_rel); }

std::shared_ptr<const Plan> PlanOfList(std::span<const TensorPtr> tensors) {
  if (tensors.empty()) {
    return nullptr;
  }
  const TensorLists lists{tensors, {}};
  if (std::shared_ptr<const Plan> plan = SingleListCache().Find(lists)) {
    return plan;
  }
  if (!IsCpuTensor(tensors.front())) {
    return nullptr;
  }
  const std::uint64_t generation = g_kept_generation.load(std::memory_order_acquire);
  FirstPlanning first{false};
  std::shared_ptr<const Plan> plan;
  try {
    plan = MakeOrderedPlan(tensors, &first);
  } catch (const NotCpuList&) {
    return nullptr;
  }
  if (!first.load(std::memory_order_relaxed)) {
    SingleListCache().Add(lists, plan, generation);
  }
  return plan;
}

std::optional<bool> CastIntoKnownLists(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor) {
  if (src.empty()) {
    return std::nullopt;
  }
  if (const std::shared_ptr<const std::pair<Plan, Plan>> plans = PairListCache().Find({src, dst})) {
    return CastPairPlans(*plans, factor);
  }
  return std::nullopt;
}

std::optional<bool> CastIntoCpuLists(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor) {
  if (src.empty() || src.size() != dst.size() || !IsCpuTensor(src.front()) || !IsCpuTensor(dst.front())) {
    return std::nullopt;
  }
  const std::uint64_t generation = g_kept_generation.load(std::memory_order_acquire);
  FirstPlanning first{false};
  std::shared_ptr<const std::pair<Plan, Plan>> plans;
  try {
    plans = MakeOrderedPairPlans(src, dst, &first);
  } catch (const NotCpuList&) {
    return std::nullopt;
  }
  if (!first.load(std::memory_order_relaxed)) {
    PairListCache().Add({src, dst}, plans, generation);
  }
  return CastPairPlans(*plans, factor);
}

void WidenToFloat(const void* src, DataType dtype, float* dst, std::size_t count) {
  DispatchDtype(dtype, [&]<DataType D>() {
    for (std::size_t i = 0; i < count; ++i) {
      dst[i] = scalar::Load<D>(src, i);
    }
  });
}

void NarrowFromFloat(const float* src, void* dst, DataType dtype, std::size_t count) {
  DispatchDtype(dtype, [&]<DataType D>() {
    for (std::size_t i = 0; i < count; ++i) {
      scalar::Store<D>(dst, i, src[i]);
    }
  });
}

// ---- the backend object ------------------------------------------------------------------

namespace {

class CpuBackend final : public HostScalingBackend {  // scaling: host states, these kernels
 public:
  std::string_view Name() const noexcept override { return "cpu"; }
  bool UnscaleAndCheck(std::span<ITensor* const> tensors, float factor) const override {
    return UnscaleAndCheckKernel(tensors, factor);
  }
  bool HasNonFinite(std::span<const ITensor* const> tensors) const override { return HasNonFiniteKernel(tensors); }
  NonFiniteAndNorm CheckAndSumSquares(std::span<const ITensor* const> tensors, float factor) const override {
    return CheckAndSumSquaresKernel(tensors, factor);
  }
  void Scale(std::span<ITensor* const> tensors, float factor) const override { ScaleKernel(tensors, factor); }
  bool CastInto(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float factor) const override {
    return CastIntoKernel(src, dst, factor);
  }
  void AddInto(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float alpha) const override {
    for (std::size_t t = 0; t < src.size(); ++t) AddPair(*src[t], *dst[t], alpha);
  }
  TensorPtr Allocate(const Shape& shape, DataType dtype, Device device) const override {
    if (!device.IsCPU()) throw ArgumentError("device", "the cpu backend allocates on cpu, got " + device.ToString());
    return Empty(shape, dtype);
  }
  TensorPtr View(const TensorPtr& base, std::size_t offset, const Shape& shape) const override {
    return cpu::View(base, offset, shape);
  }

 private:
  // dst = dst + alpha * src, one dtype dispatch per pair. The product goes through a block
  // buffer, so it is rounded to FP32 before the sum (as on CUDA) and never contracted into an FMA.
  static void AddPair(const ITensor& src_tensor, ITensor& dst_tensor, float alpha) {
    const void* src = Data(src_tensor);
    void* dst = MutableData(dst_tensor);
    const auto size = static_cast<std::int64_t>(dst_tensor.Size());
    constexpr std::int64_t kBlock = 1024;
    DispatchDtype(src_tensor.GetDataType(), [&]<DataType S>() {
      DispatchDtype(dst_tensor.GetDataType(), [&]<DataType D>() {
#pragma omp parallel for schedule(static) if (size > 16 * kBlock)
        for (std::int64_t begin = 0; begin < size; begin += kBlock) {
          const std::int64_t end = std::min(size, begin + kBlock);
          std::array<float, kBlock> product;
          const auto first = static_cast<std::size_t>(begin);
          const auto count = static_cast<std::size_t>(end - begin);
          for (std::size_t i = 0; i < count; ++i) product[i] = alpha * scalar::Load<S>(src, first + i);
          for (std::size_t i = 0; i < count; ++i) {
            scalar::Store<D>(dst, first + i, scalar::Load<D>(dst, first + i) + product[i]);
          }
        }
      });
    });
  }
};

}  // namespace

const TensorBackend& Backend() noexcept {
  static const CpuBackend kBackend;
  return kBackend;
}

std::string_view InstructionSet() noexcept { return ActiveKernels().name; }

}  // namespace mlframework::backends::cpu
