// The launch planner, the table image and the block-to-piece walk of the CUDA
// kernels, run on the host: every element of every tensor is visited exactly
// once, by one block, every block but the last gets a full chunk, and a list of
// any length is one launch.
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "mlframework/backends/cuda/LaunchPlan.hpp"

using namespace mlframework;
namespace cu = mlframework::backends::cuda;

namespace {

std::vector<cu::ListEntry> EntriesOfSizes(const std::vector<std::uint64_t>& sizes, std::vector<std::uint8_t>& storage) {
  storage.assign(sizes.size(), 0);
  std::vector<cu::ListEntry> entries;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    entries.push_back(cu::ListEntry{&storage[i], &storage[i], DataType::Float16, DataType::Float32, sizes[i]});
  }
  return entries;
}

// The table image of a planned list, in host memory (operator new aligns it to at least 8
// bytes, as device memory is).
struct HostTable {
  cu::TableShape shape;
  std::vector<std::byte> image;

  HostTable(std::span<const cu::ListEntry> entries, cu::Access access)
      : shape(cu::ShapeOf(entries, access)), image(shape.bytes) {
    cu::WriteTable(entries, shape, image.data());
  }
  cu::TableView View() const { return cu::TableView::Of(image.data(), shape.count, shape.chunk_elements); }
};

// Walks every block of the launch like the kernels do; counts visits per element.
void CheckCoverage(const std::vector<std::uint64_t>& sizes, cu::Access access) {
  std::vector<std::uint8_t> storage;
  const auto entries = EntriesOfSizes(sizes, storage);
  const HostTable table(entries, access);
  const cu::TableView view = table.View();
  std::vector<std::vector<int>> visits(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    visits[i].assign(sizes[i], 0);
  }
  const std::uint64_t total = std::accumulate(sizes.begin(), sizes.end(), std::uint64_t{0});
  const std::uint64_t chunk = table.shape.chunk_elements;
  BOOST_TEST(table.shape.total == total);
  BOOST_TEST(view.offsets[view.count] == total);
  BOOST_TEST(chunk == cu::ChunkElementsFor(total, access));
  BOOST_TEST(table.shape.blocks == (total + chunk - 1) / chunk);
  for (std::uint64_t block = 0; block < table.shape.blocks; ++block) {
    std::uint64_t work = 0;
    cu::ForEachPieceOfBlock(view, block, [&](int s, std::uint64_t lo, std::uint64_t hi) {
      // Map the slot back to the list index through its pointer.
      const auto index = static_cast<std::size_t>(static_cast<std::uint8_t*>(view.data[0][s]) - storage.data());
      BOOST_TEST_REQUIRE(hi <= sizes[index]);
      for (std::uint64_t e = lo; e < hi; ++e) {
        ++visits[index][e];
      }
      work += hi - lo;
    });
    if (block + 1 < table.shape.blocks) {
      BOOST_TEST(work == chunk);  // equal work per block
    } else {
      BOOST_TEST(work == total - block * chunk);
    }
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    for (const int v : visits[i]) {
      BOOST_TEST_REQUIRE(v == 1);
    }
  }
}

void CheckCoverage(const std::vector<std::uint64_t>& sizes) {
  CheckCoverage(sizes, cu::Access::ReadOnly);
  CheckCoverage(sizes, cu::Access::Writes);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaLaunchPlan)

BOOST_AUTO_TEST_CASE(EmptyListsAndEmptyTensorsLaunchNothing) {
  std::vector<std::uint8_t> storage;
  for (const cu::Access access : {cu::Access::ReadOnly, cu::Access::Writes}) {
    BOOST_TEST(cu::ShapeOf({}, access).blocks == 0u);
    const cu::TableShape shape = cu::ShapeOf(EntriesOfSizes({0, 0, 0}, storage), access);
    BOOST_TEST(shape.blocks == 0u);
    BOOST_TEST(shape.count == 0);
  }
}

BOOST_AUTO_TEST_CASE(TableKeepsOrderPointersAndDtypes) {
  std::vector<std::uint8_t> storage;
  auto entries = EntriesOfSizes({5, 0, 7}, storage);
  entries[2].dst = &storage[0];
  entries[2].src_dtype = DataType::BFloat16;
  const HostTable table(entries, cu::Access::ReadOnly);
  const cu::TableView view = table.View();
  BOOST_TEST(view.count == 2);
  BOOST_TEST(table.shape.bytes == cu::TableBytes(2));
  BOOST_TEST(view.offsets[0] == 0u);
  BOOST_TEST(view.offsets[1] == 5u);
  BOOST_TEST(view.offsets[2] == 12u);
  BOOST_TEST(view.data[0][0] == static_cast<void*>(&storage[0]));
  BOOST_TEST(view.data[0][1] == static_cast<void*>(&storage[2]));
  BOOST_TEST(view.data[1][1] == static_cast<void*>(&storage[0]));
  BOOST_TEST(view.dtype[0][0] == static_cast<std::uint8_t>(DataType::Float16));
  BOOST_TEST(view.dtype[0][1] == static_cast<std::uint8_t>(DataType::BFloat16));
  BOOST_TEST(view.dtype[1][0] == static_cast<std::uint8_t>(DataType::Float32));
  BOOST_TEST(table.shape.blocks == 1u);
}

BOOST_AUTO_TEST_CASE(SmallTablesFitTheLaunchAndLargerOnesDoNot) {
  // The image's arrays end where the next begins, and the inline limit is exact.
  for (const std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{3}, cu::kInlineTableTensors}) {
    BOOST_TEST(cu::TableBytes(n) >= n * 26 + 8);
    BOOST_TEST(cu::TableBytes(n) < n * 26 + 16);
    BOOST_TEST(cu::TableBytes(n) % 8 == 0u);
  }
  BOOST_TEST(cu::TableBytes(cu::kInlineTableTensors) <= cu::kInlineTableBytes);
  BOOST_TEST(cu::TableBytes(cu::kInlineTableTensors + 1) > cu::kInlineTableBytes);
  // A view of the inline image reads what was written into it.
  std::vector<std::uint8_t> storage;
  const auto entries = EntriesOfSizes(std::vector<std::uint64_t>(cu::kInlineTableTensors, 3), storage);
  cu::LaunchTable launch;
  const cu::TableShape shape = cu::ShapeOf(entries, cu::Access::Writes);
  launch.count = shape.count;
  launch.chunk_elements = shape.chunk_elements;
  cu::WriteTable(entries, shape, launch.inline_image);
  const cu::TableView view = launch.View();
  BOOST_TEST(view.offsets[view.count] == 3 * cu::kInlineTableTensors);
  BOOST_TEST(view.data[1][view.count - 1] == static_cast<void*>(&storage.back()));
}

BOOST_AUTO_TEST_CASE(ChunkBoundariesAreCoveredExactlyOnce) {
  const std::uint64_t k = cu::kMinChunkElements;
  CheckCoverage({1});
  CheckCoverage({k - 1});
  CheckCoverage({k});
  CheckCoverage({k + 1});
  CheckCoverage({3 * k + 5, 1, k - 1, 2, k, 0, 17});
}

BOOST_AUTO_TEST_CASE(ReadOnlyChunksGrowWithTheLaunchUpToTheLargest) {
  constexpr std::uint64_t kMin = cu::kMinChunkElements;
  constexpr std::uint64_t kMax = cu::kMaxChunkElements;
  constexpr std::uint64_t kBlocks = cu::kBlocksPerLaunch;
  constexpr cu::Access kRead = cu::Access::ReadOnly;
  BOOST_TEST(cu::ChunkElementsFor(0, kRead) == kMin);
  BOOST_TEST(cu::ChunkElementsFor(2 * kMin * kBlocks - 1, kRead) == kMin);
  BOOST_TEST(cu::ChunkElementsFor(2 * kMin * kBlocks, kRead) == 2 * kMin);
  BOOST_TEST(cu::ChunkElementsFor(kMax * kBlocks, kRead) == kMax);
  BOOST_TEST(cu::ChunkElementsFor(std::uint64_t{1} << 40, kRead) == kMax);
  for (std::uint64_t total = 1; total < (std::uint64_t{1} << 36); total = total * 3 + 1) {
    const std::uint64_t chunk = cu::ChunkElementsFor(total, kRead);
    BOOST_TEST_REQUIRE((chunk >= kMin && chunk <= kMax && (chunk & (chunk - 1)) == 0));
    BOOST_TEST_REQUIRE((chunk == kMin || (total + chunk - 1) / chunk >= kBlocks));
    BOOST_TEST_REQUIRE(cu::ChunkElementsFor(total, cu::Access::Writes) == kMin);
  }
  // A launch large enough for the largest chunk is still covered exactly once.
  CheckCoverage({kMax * kBlocks + 5, 3, kMax - 1});
}

BOOST_AUTO_TEST_CASE(ManySmallTensorsShareBlocksInOneLaunch) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint64_t> size(0, 3000);
  std::vector<std::uint64_t> sizes(1000);
  for (auto& s : sizes) {
    s = size(rng);
  }
  CheckCoverage(sizes);
  // 10,000 tensors of 10 elements: one table, 25 blocks.
  std::vector<std::uint8_t> storage;
  const HostTable table(EntriesOfSizes(std::vector<std::uint64_t>(10000, 10), storage), cu::Access::Writes);
  BOOST_TEST(table.shape.count == 10000);
  BOOST_TEST(table.shape.blocks == (100000 + cu::kMinChunkElements - 1) / cu::kMinChunkElements);
  CheckCoverage(std::vector<std::uint64_t>(10000, 10));
}

BOOST_AUTO_TEST_SUITE_END()
