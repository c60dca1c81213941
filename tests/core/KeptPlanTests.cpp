// The CPU backend's kept plans are keyed on the lists' memory (src/mlframework/backends/cpu/ListKey.hpp): a
// framework that wraps the same memory in new tensors every step (cpu::Wrap, FromDLPack) reuses the plan, and memory
// that changed at any position never does. The cache is private (hidden in the shared library): its own instances are
// tested from source, then the library's kept plans through the public API on lists wrapped anew every step.
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "core/KernelReference.hpp"
#include "mlframework/backends/cpu/PlanCaches.hpp"

using namespace mlframework;
using namespace kernel_test;
using mlframework::backends::cpu::ListCache;
using mlframework::backends::cpu::PairPlans;
using mlframework::backends::cpu::Plan;
using mlframework::backends::cpu::TensorLists;

namespace {

// Memory a framework owns: one buffer per tensor, of mixed dtypes, wrapped anew on each call.
struct OwnedMemory {
  std::vector<DataType> dtypes;
  std::vector<Shape> shapes;
  std::vector<std::vector<std::uint32_t>> buffers;  // 4-byte words hold FP32 and 16-bit elements alike

  OwnedMemory(std::size_t count, Rng& rng) {
    for (std::size_t i = 0; i < count; ++i) {
      const DataType dtype = kAllTypes[i % 3];
      const std::size_t rows = rng.Between(1, 8);
      const std::size_t cols = rng.Between(1, 300);
      dtypes.push_back(dtype);
      shapes.push_back(i % 2 == 0 ? Shape{rows, cols} : Shape{rows * cols});
      std::vector<std::uint32_t> words(rows * cols);
      for (std::uint32_t& word : words) {
        const std::uint32_t bits = RandomFiniteBits(dtype, rng);
        word = dtype == DataType::Float32 ? bits : (bits | (bits << 16));
      }
      buffers.push_back(std::move(words));
    }
  }

  // New tensor objects over the memory, as a framework hands them each step.
  std::vector<TensorPtr> Wrap() {
    std::vector<TensorPtr> list;
    list.reserve(buffers.size());
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      list.push_back(backends::cpu::Wrap(buffers[i].data(), shapes[i], dtypes[i], nullptr));
    }
    return list;
  }
};

TensorLists One(const std::vector<TensorPtr>& list) { return {std::span<const TensorPtr>(list), {}}; }
TensorLists Two(const std::vector<TensorPtr>& src, const std::vector<TensorPtr>& dst) {
  return {std::span<const TensorPtr>(src), std::span<const TensorPtr>(dst)};
}

// Plans the cache only hands back: their identity tells which one a call got.
std::shared_ptr<const Plan> APlan() { return std::make_shared<const Plan>(); }

// Makes @p cache keep a plan for @p wrap()'s memory: two plannings (a list is kept from its second
// planning on), each on new tensor objects. Returns the kept plan.
template <typename Wrapper>
std::shared_ptr<const Plan> Keep(ListCache<Plan>& cache, Wrapper&& wrap) {
  for (int call = 0; call < 2; ++call) {
    const auto list = wrap();
    BOOST_TEST(cache.Find(One(list)) == nullptr, "call " << call);
    cache.Add(One(list), APlan());
  }
  const auto list = wrap();
  auto kept = cache.Find(One(list));
  BOOST_TEST(kept != nullptr);
  return kept;
}

// A tensor of no backend that delegates to a CPU tensor: the same memory, another kind of tensor.
class Foreign final : public ITensor {
 public:
  explicit Foreign(TensorPtr inner) : inner_(std::move(inner)) {}
  DataType GetDataType() const override { return inner_->GetDataType(); }
  Device GetDevice() const override { return inner_->GetDevice(); }
  const Shape& GetShape() const override { return inner_->GetShape(); }
  std::size_t Size() const override { return inner_->Size(); }
  std::vector<float> ToFloatVector() const override { return inner_->ToFloatVector(); }
  void CopyFromFloats(std::span<const float> values) override { inner_->CopyFromFloats(values); }

 private:
  TensorPtr inner_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(KeptPlans)

// The same memory wrapped in new tensor objects every call takes the kept plan from the third
// call on, with one thread and with the parallel comparison of long lists.
BOOST_AUTO_TEST_CASE(RewrappedMemoryTakesTheKeptPlan) {
  ThreadCountGuard guard;
  Rng rng(41);
  for (const std::size_t count : {std::size_t{64}, std::size_t{1500}}) {
    for (const int threads : {1, 2}) {
      omp_set_num_threads(threads);
      BOOST_TEST_CONTEXT("count " << count << ", threads " << threads) {
        OwnedMemory memory(count, rng);
        ListCache<Plan> cache;
        const auto kept = Keep(cache, [&] { return memory.Wrap(); });
        for (int step = 0; step < 3; ++step) {
          const auto list = memory.Wrap();
          BOOST_TEST(cache.Find(One(list)) == kept, "step " << step);
        }
      }
    }
  }
}

// A list passed again in the same tensor objects takes the kept plan without reading them (the
// fast path); once one of them is destroyed and replaced by a tensor over other memory the list
// misses, while the others, passed again, still take the plan through their memory.
BOOST_AUTO_TEST_CASE(SameObjectsTakeTheKeptPlanUntilOneIsReplaced) {
  Rng rng(40);
  OwnedMemory memory(96, rng);
  ListCache<Plan> cache;
  std::vector<TensorPtr> list = memory.Wrap();
  for (int call = 0; call < 2; ++call) {
    BOOST_TEST(cache.Find(One(list)) == nullptr);
    cache.Add(One(list), APlan());
  }
  const auto kept = cache.Find(One(list));
  BOOST_TEST(kept != nullptr);
  BOOST_TEST(cache.Find(One(list)) == kept);
  // Destroyed first, so the allocator most likely puts the new object at the old one's address:
  // the same object pointers over other memory must still miss.
  const ITensor* before = list[7].get();
  list[7].reset();
  std::vector<std::uint32_t> elsewhere(memory.buffers[7].size());
  list[7] = backends::cpu::Wrap(elsewhere.data(), memory.shapes[7], memory.dtypes[7], nullptr);
  BOOST_TEST_MESSAGE("replacement at the same address: " << (list[7].get() == before));
  BOOST_TEST(cache.Find(One(list)) == nullptr);
  list[7] = backends::cpu::Wrap(memory.buffers[7].data(), memory.shapes[7], memory.dtypes[7], nullptr);
  BOOST_TEST(cache.Find(One(list)) == kept);  // a new object over the key's memory
}

// Memory that changed at one position misses: another buffer of the same shape, one element
// fewer, another dtype over the same bytes, two tensors swapped, a null entry, another kind of
// tensor over the same memory, a longer or shorter list. Moved memory (same shapes, new buffers) misses.
BOOST_AUTO_TEST_CASE(ChangedMemoryMisses) {
  ThreadCountGuard guard;
  Rng rng(42);
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (const std::size_t count : {std::size_t{80}, std::size_t{1200}}) {
      BOOST_TEST_CONTEXT("count " << count << ", threads " << threads) {
        OwnedMemory memory(count, rng);
        ListCache<Plan> cache;
        const auto kept = Keep(cache, [&] { return memory.Wrap(); });
        for (const std::size_t k : {std::size_t{0}, count / 2, count - 1}) {
          BOOST_TEST_CONTEXT("position " << k) {
            auto list = memory.Wrap();
            std::vector<std::uint32_t> elsewhere(memory.buffers[k].size());
            list[k] = backends::cpu::Wrap(elsewhere.data(), memory.shapes[k], memory.dtypes[k], nullptr);
            BOOST_TEST(cache.Find(One(list)) == nullptr, "another buffer");

            list = memory.Wrap();
            list[k] = backends::cpu::Wrap(memory.buffers[k].data(), {memory.buffers[k].size() - 1}, memory.dtypes[k],
                                          nullptr);
            BOOST_TEST(cache.Find(One(list)) == nullptr, "one element fewer");

            list = memory.Wrap();
            const DataType other = memory.dtypes[k] == DataType::Float16 ? DataType::BFloat16 : DataType::Float16;
            list[k] = backends::cpu::Wrap(memory.buffers[k].data(), {memory.buffers[k].size()}, other, nullptr);
            BOOST_TEST(cache.Find(One(list)) == nullptr, "another dtype");

            list = memory.Wrap();
            std::swap(list[k], list[(k + 1) % count]);
            BOOST_TEST(cache.Find(One(list)) == nullptr, "swapped");

            list = memory.Wrap();
            list[k] = nullptr;
            BOOST_TEST(cache.Find(One(list)) == nullptr, "null entry");

            list = memory.Wrap();
            list[k] = std::make_shared<Foreign>(list[k]);
            BOOST_TEST(cache.Find(One(list)) == nullptr, "another kind of tensor");
          }
        }
        auto longer = memory.Wrap();
        longer.push_back(longer.front());
        BOOST_TEST(cache.Find(One(longer)) == nullptr);
        auto shorter = memory.Wrap();
        shorter.pop_back();
        BOOST_TEST(cache.Find(One(shorter)) == nullptr);

        OwnedMemory moved = memory;  // the same shapes and dtypes in new buffers
        BOOST_TEST(cache.Find(One(moved.Wrap())) == nullptr, "moved memory");
        BOOST_TEST(cache.Find(One(memory.Wrap())) == kept, "the kept memory again");
      }
    }
  }
}

// Short lists are never kept; a list is kept only once the same memory is planned a second
// time, even with lists at new addresses planned between; lists dying each step at new
// addresses are never kept.
BOOST_AUTO_TEST_CASE(OnlyLongListsPlannedTwiceOverTheSameMemory) {
  Rng rng(43);
  ListCache<Plan> cache;
  OwnedMemory small(ListCache<Plan>::kMinTensors - 1, rng);
  for (int call = 0; call < 4; ++call) {
    cache.Add(One(small.Wrap()), APlan());
    BOOST_TEST(cache.Find(One(small.Wrap())) == nullptr, "call " << call);
  }
  OwnedMemory stable(100, rng);
  cache.Add(One(stable.Wrap()), APlan());
  BOOST_TEST(cache.Find(One(stable.Wrap())) == nullptr, "planned once");
  for (int step = 0; step < 3; ++step) {
    OwnedMemory fresh(70, rng);  // a list at new addresses, dead after the step
    cache.Add(One(fresh.Wrap()), APlan());
    BOOST_TEST(cache.Find(One(fresh.Wrap())) == nullptr, "fresh list, step " << step);
  }
  const auto plan = APlan();
  cache.Add(One(stable.Wrap()), plan);
  BOOST_TEST(cache.Find(One(stable.Wrap())) == plan, "planned twice");
}

// A cast's two lists: kept on their memory, and a destination of the same memory with another
// shape of the same count misses (a cast of kept lists skips the caller's shape check).
BOOST_AUTO_TEST_CASE(CastListsKeyedOnBothListsAndTheirShapes) {
  Rng rng(44);
  OwnedMemory src(90, rng);
  OwnedMemory dst(90, rng);
  for (std::size_t i = 0; i < dst.dtypes.size(); ++i) {
    dst.shapes[i] = src.shapes[i];
    dst.buffers[i].resize(src.buffers[i].size());
  }
  ListCache<PairPlans> cache;
  const auto plans = std::make_shared<const PairPlans>();
  cache.Add(Two(src.Wrap(), dst.Wrap()), std::make_shared<const PairPlans>());
  cache.Add(Two(src.Wrap(), dst.Wrap()), plans);
  BOOST_TEST(cache.Find(Two(src.Wrap(), dst.Wrap())) == plans);

  const std::size_t k = 0;  // a rank-2 shape (OwnedMemory)
  BOOST_REQUIRE(src.shapes[k].size() == 2);
  auto out = dst.Wrap();
  const Shape transposed{src.shapes[k][1], src.shapes[k][0]};
  out[k] = backends::cpu::Wrap(dst.buffers[k].data(), transposed, dst.dtypes[k], nullptr);
  if (transposed != src.shapes[k]) {
    BOOST_TEST(cache.Find(Two(src.Wrap(), out)) == nullptr, "another shape");
  }
  out = dst.Wrap();
  out[1] = backends::cpu::Wrap(dst.buffers[1].data(), {dst.buffers[1].size()}, dst.dtypes[1], nullptr);
  BOOST_TEST(cache.Find(Two(src.Wrap(), out)) == plans, "the same rank-1 shape");
  BOOST_TEST(cache.Find(Two(dst.Wrap(), src.Wrap())) == nullptr, "source and destination swapped");
  BOOST_TEST(cache.Find(One(src.Wrap())) == nullptr, "the source alone");
}

// Through the library: a list wrapped anew every step over the same memory, checked, unscaled
// and cast each step against the reference; then memory that moved (new buffers with an Inf) and
// memory whose dtype changed at one position, after the original's plan was kept.
BOOST_AUTO_TEST_CASE(RewrappedListsGiveTheReferenceResults) {
  ThreadCountGuard guard;
  Rng rng(45);
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    OwnedMemory memory(1100, rng);
    for (int step = 0; step < 5; ++step) {
      BOOST_TEST_CONTEXT("threads " << threads << ", step " << step) {
        const auto list = memory.Wrap();
        const std::size_t k = rng.Between(0, list.size() - 1);
        const bool inf = step % 2 == 1 && list[k]->Size() > 0;
        const auto before = Snapshot(list);
        if (inf) {
          SetElementBits(list[k], list[k]->Size() - 1, kNonFinite[1]);
        }
        BOOST_TEST(HasNonFinite(list) == inf);
        auto expected = Snapshot(list);
        const bool found = RefUnscale(list, expected, 0.5f);
        BOOST_TEST(UnscaleAndCheck(list, 0.5f) == found);
        RequireSameBits(list, expected, "unscaled");
        std::vector<TensorPtr> out;
        out.reserve(list.size());
        for (const auto& t : list) {
          out.push_back(backends::cpu::Empty(t->GetShape(), DataType::Float32));
        }
        auto cast = Snapshot(out);
        const bool cast_found = RefCast(list, out, cast, 2.0f);
        BOOST_TEST(CastInto(list, out, 2.0f) == cast_found);
        RequireSameBits(out, cast, "cast");
        Restore(list, before);
      }
    }
    // Moved: the same shapes in new buffers, an Inf in the last tensor of the copy only.
    OwnedMemory moved = memory;
    auto list = moved.Wrap();
    SetElementBits(list.back(), 0, kNonFinite[2]);
    BOOST_TEST(HasNonFinite(list));
    BOOST_TEST(!HasNonFinite(memory.Wrap()));
    // One position read as BF16 instead of FP16 (finite FP16 words are finite BF16 ones): the
    // results are BF16's, which an FP16 plan would not write.
    list = memory.Wrap();
    const std::size_t k = 1;  // an FP16 tensor (kAllTypes order)
    BOOST_REQUIRE(memory.dtypes[k] == DataType::Float16);
    list[k] = backends::cpu::Wrap(memory.buffers[k].data(), memory.shapes[k], DataType::BFloat16, nullptr);
    auto expected = Snapshot(list);
    const bool found = RefUnscale(list, expected, 1.0f / 8.0f);
    BOOST_TEST(UnscaleAndCheck(list, 1.0f / 8.0f) == found);
    RequireSameBits(list, expected, "dtype changed at one position");
  }
}

BOOST_AUTO_TEST_SUITE_END()
