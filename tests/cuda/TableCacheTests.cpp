// The cache of uploaded table images (TableCache), driven on the host with fake tables: a
// list passed again finds its table when the same memory comes back in new objects, never
// when any tensor's memory, size or dtype changed, and the cache stays bounded, freeing each
// table exactly once.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>

#include "mlframework/backends/cuda/LaunchPlan.hpp"
#include "mlframework/backends/cuda/TableCache.hpp"

using namespace mlframework;
namespace cu = mlframework::backends::cuda;

namespace {

constexpr int kDevice = 0;

// Fake device memory: the entries point into it, as tensors point into device memory.
struct FakeMemory {
  std::vector<float> elements = std::vector<float>(1 << 16);
  float* At(std::size_t offset) { return elements.data() + offset; }
};

// A list of @p count tensors of @p size elements laid end to end from @p first, updated in place.
std::vector<cu::ListEntry> ListAt(FakeMemory& memory, std::size_t first, std::size_t count, std::uint64_t size = 8,
                                  DataType dtype = DataType::Float32) {
  std::vector<cu::ListEntry> entries;
  for (std::size_t i = 0; i < count; ++i) {
    float* data = memory.At(first + i * size);
    entries.push_back(cu::ListEntry{data, data, dtype, dtype, size});
  }
  return entries;
}

// Fake tables (distinct addresses) and a count of the times each was freed.
struct FakeTables {
  std::vector<std::byte> storage = std::vector<std::byte>(1024);
  std::map<std::byte*, int> freed;

  std::byte* Table(std::size_t index) { return &storage.at(index); }
  cu::TableCache::Release Release() {
    return [this](std::byte* table) { ++freed[table]; };
  }
  int FreedCount(std::byte* table) const {
    const auto it = freed.find(table);
    return it == freed.end() ? 0 : it->second;
  }
};

void Keep(cu::TableCache& cache, const std::vector<cu::ListEntry>& entries, std::byte* table) {
  const cu::TableShape shape = cu::ShapeOf(entries, cu::Access::Writes);
  cache.Insert(cu::TableKey::Of(kDevice, entries), table, shape.count, shape.total);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(TableCacheTests)

BOOST_AUTO_TEST_CASE(same_memory_in_new_objects_finds_the_kept_table) {
  FakeMemory memory;
  FakeTables tables;
  cu::TableCache cache(4, tables.Release());
  const auto first_step = ListAt(memory, 0, 100);
  Keep(cache, first_step, tables.Table(0));
  // The framework wraps the same memory anew: new entries, equal field by field.
  const auto next_step = ListAt(memory, 0, 100);
  BOOST_TEST(next_step.data() != first_step.data());
  const cu::KeptTable* kept = cache.Find(kDevice, next_step);
  BOOST_TEST_REQUIRE(kept != nullptr);
  BOOST_TEST(kept->table == tables.Table(0));
  BOOST_TEST(kept->count == 100);
  BOOST_TEST(kept->total == 800u);
  BOOST_TEST(cache.Find(kDevice, next_step) == kept);  // found again: nothing moved
  BOOST_TEST(tables.freed.empty());
}

BOOST_AUTO_TEST_CASE(a_kept_shape_plans_the_launch_the_list_would) {
  FakeMemory memory;
  FakeTables tables;
  cu::TableCache cache(2, tables.Release());
  auto entries = ListAt(memory, 0, 300, 5000);
  entries[7].size = 0;  // empty tensors are not in the image, and not in the count
  Keep(cache, entries, tables.Table(0));
  const cu::KeptTable* kept = cache.Find(kDevice, entries);
  BOOST_TEST_REQUIRE(kept != nullptr);
  for (const cu::Access access : {cu::Access::ReadOnly, cu::Access::Writes}) {
    const cu::TableShape planned = cu::ShapeOf(entries, access);
    const cu::TableShape from_kept = cu::ShapeOfTotal(kept->count, kept->total, access);
    BOOST_TEST(from_kept.count == planned.count);
    BOOST_TEST(from_kept.total == planned.total);
    BOOST_TEST(from_kept.chunk_elements == planned.chunk_elements);
    BOOST_TEST(from_kept.blocks == planned.blocks);
    BOOST_TEST(from_kept.bytes == planned.bytes);
  }
}

BOOST_AUTO_TEST_CASE(any_change_at_any_position_misses) {
  FakeMemory memory;
  FakeTables tables;
  cu::TableCache cache(4, tables.Release());
  const std::size_t count = 100;
  const auto kept = ListAt(memory, 0, count);
  Keep(cache, kept, tables.Table(0));
  for (const std::size_t at : {std::size_t{0}, std::size_t{1}, count / 2, count - 2, count - 1}) {
    BOOST_TEST_CONTEXT("position " << at) {
      auto moved = kept;
      moved[at].src = moved[at].dst = memory.At(50000);
      BOOST_TEST(cache.Find(kDevice, moved) == nullptr);
      auto moved_destination = kept;
      moved_destination[at].dst = memory.At(50000);
      BOOST_TEST(cache.Find(kDevice, moved_destination) == nullptr);
      auto resized = kept;
      resized[at].size = 7;
      BOOST_TEST(cache.Find(kDevice, resized) == nullptr);
      auto emptied = kept;
      emptied[at].size = 0;
      BOOST_TEST(cache.Find(kDevice, emptied) == nullptr);
      auto retyped = kept;
      retyped[at].src_dtype = DataType::Float16;
      BOOST_TEST(cache.Find(kDevice, retyped) == nullptr);
      auto retyped_destination = kept;
      retyped_destination[at].dst_dtype = DataType::BFloat16;
      BOOST_TEST(cache.Find(kDevice, retyped_destination) == nullptr);
    }
  }
  // Two neighbours swapped: the same set of memory in another order is another table.
  auto swapped = kept;
  std::swap(swapped[10], swapped[11]);
  BOOST_TEST(cache.Find(kDevice, swapped) == nullptr);
  // Shorter, longer, another device.
  BOOST_TEST(cache.Find(kDevice, std::span(kept).first(count - 1)) == nullptr);
  BOOST_TEST(cache.Find(kDevice, ListAt(memory, 0, count + 1)) == nullptr);
  BOOST_TEST(cache.Find(kDevice + 1, kept) == nullptr);
  // The kept list itself still hits, and nothing was freed by the misses.
  BOOST_TEST(cache.Find(kDevice, kept) != nullptr);
  BOOST_TEST(tables.freed.empty());
}

BOOST_AUTO_TEST_CASE(the_least_recently_used_table_is_freed_beyond_capacity) {
  FakeMemory memory;
  FakeTables tables;
  cu::TableCache cache(3, tables.Release());
  const auto a = ListAt(memory, 0, 100);
  const auto b = ListAt(memory, 1000, 100);
  const auto c = ListAt(memory, 2000, 100);
  const auto d = ListAt(memory, 3000, 100);
  Keep(cache, a, tables.Table(0));
  Keep(cache, b, tables.Table(1));
  Keep(cache, c, tables.Table(2));
  BOOST_TEST(cache.Find(kDevice, a) != nullptr);  // a is now the most recent; b the least
  Keep(cache, d, tables.Table(3));
  BOOST_TEST(cache.Size() == 3u);
  BOOST_TEST(tables.FreedCount(tables.Table(1)) == 1);
  BOOST_TEST(tables.freed.size() == 1u);
  BOOST_TEST(cache.Find(kDevice, b) == nullptr);
  BOOST_TEST(cache.Find(kDevice, a)->table == tables.Table(0));
  BOOST_TEST(cache.Find(kDevice, c)->table == tables.Table(2));
  BOOST_TEST(cache.Find(kDevice, d)->table == tables.Table(3));
}

BOOST_AUTO_TEST_CASE(the_cache_stays_bounded_and_frees_each_table_once) {
  FakeMemory memory;
  FakeTables tables;
  const std::size_t lists = 100;
  {
    cu::TableCache cache(cu::TableCache::kDefaultCapacity, tables.Release());
    for (std::size_t i = 0; i < lists; ++i) {
      Keep(cache, ListAt(memory, i * 100, 90), tables.Table(i));
      BOOST_TEST(cache.Size() == std::min(i + 1, cu::TableCache::kDefaultCapacity));
      BOOST_TEST(tables.freed.size() == (i + 1) - cache.Size());
    }
    // The newest kDefaultCapacity lists are kept, the older ones freed.
    for (std::size_t i = 0; i < lists; ++i) {
      const bool kept = i + cu::TableCache::kDefaultCapacity >= lists;
      BOOST_TEST((cache.Find(kDevice, ListAt(memory, i * 100, 90)) != nullptr) == kept);
      BOOST_TEST(tables.FreedCount(tables.Table(i)) == (kept ? 0 : 1));
    }
  }
  // The destructor freed the rest: every table exactly once.
  BOOST_TEST(tables.freed.size() == lists);
  for (std::size_t i = 0; i < lists; ++i) {
    BOOST_TEST(tables.FreedCount(tables.Table(i)) == 1);
  }
}

BOOST_AUTO_TEST_CASE(keeping_an_equal_key_again_replaces_and_frees_the_old_table) {
  FakeMemory memory;
  FakeTables tables;
  cu::TableCache cache(4, tables.Release());
  const auto list = ListAt(memory, 0, 100);
  Keep(cache, list, tables.Table(0));
  Keep(cache, list, tables.Table(1));
  BOOST_TEST(cache.Size() == 1u);
  BOOST_TEST(tables.FreedCount(tables.Table(0)) == 1);
  BOOST_TEST(cache.Find(kDevice, list)->table == tables.Table(1));
}

BOOST_AUTO_TEST_CASE(clear_frees_every_table) {
  FakeMemory memory;
  FakeTables tables;
  cu::TableCache cache(4, tables.Release());
  Keep(cache, ListAt(memory, 0, 100), tables.Table(0));
  Keep(cache, ListAt(memory, 1000, 100), tables.Table(1));
  cache.Clear();
  BOOST_TEST(cache.Size() == 0u);
  BOOST_TEST(tables.FreedCount(tables.Table(0)) == 1);
  BOOST_TEST(tables.FreedCount(tables.Table(1)) == 1);
  BOOST_TEST(cache.Find(kDevice, ListAt(memory, 0, 100)) == nullptr);
}

BOOST_AUTO_TEST_CASE(bad_construction_is_an_argument_error) {
  FakeTables tables;
  BOOST_CHECK_EXCEPTION(cu::TableCache(0, tables.Release()), ArgumentError, [](const ArgumentError& error) {
    return std::string(error.what()).find("capacity") != std::string::npos;
  });
  BOOST_CHECK_THROW(cu::TableCache(4, cu::TableCache::Release{}), ArgumentNullError);
}

BOOST_AUTO_TEST_SUITE_END()
