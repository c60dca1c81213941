// The launch planner and the block-to-piece walk of the CUDA kernels, run on
// the host: every element of every tensor is visited exactly once, by one
// block, every block but the last of a launch gets a full chunk, and long
// lists are split into launches of at most kMaxTensorsPerLaunch tensors.
#include <cstdint>
#include <numeric>
#include <random>
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

// Walks every block of every launch like the kernels do; counts visits per element.
void CheckCoverage(const std::vector<std::uint64_t>& sizes, cu::Access access) {
  std::vector<std::uint8_t> storage;
  const auto entries = EntriesOfSizes(sizes, storage);
  const auto launches = cu::PlanLaunches(entries, access);
  std::vector<std::vector<int>> visits(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    visits[i].assign(sizes[i], 0);
  }
  for (const cu::Launch& launch : launches) {
    BOOST_TEST_REQUIRE(launch.meta.count >= 1);
    BOOST_TEST_REQUIRE(launch.meta.count <= cu::kMaxTensorsPerLaunch);
    const std::uint64_t total = launch.meta.offsets[launch.meta.count];
    const std::uint64_t chunk = launch.meta.chunk_elements;
    BOOST_TEST(chunk == cu::ChunkElementsFor(total, access));
    BOOST_TEST(launch.blocks == (total + chunk - 1) / chunk);
    for (std::uint64_t block = 0; block < launch.blocks; ++block) {
      std::uint64_t work = 0;
      cu::ForEachPieceOfBlock(launch.meta, block, [&](int s, std::uint64_t lo, std::uint64_t hi) {
        // Map the slot back to the list index through its pointer.
        const auto index =
            static_cast<std::size_t>(static_cast<std::uint8_t*>(launch.meta.data[0][s]) - storage.data());
        BOOST_TEST_REQUIRE(hi <= sizes[index]);
        for (std::uint64_t e = lo; e < hi; ++e) {
          ++visits[index][e];
        }
        work += hi - lo;
      });
      if (block + 1 < launch.blocks) {
        BOOST_TEST(work == chunk);  // equal work per block
      } else {
        BOOST_TEST(work == total - block * chunk);
      }
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
    BOOST_TEST(cu::PlanLaunches({}, access).empty());
    BOOST_TEST(cu::PlanLaunches(EntriesOfSizes({0, 0, 0}, storage), access).empty());
  }
}

BOOST_AUTO_TEST_CASE(TableKeepsOrderPointersAndDtypes) {
  std::vector<std::uint8_t> storage;
  const auto entries = EntriesOfSizes({5, 0, 7}, storage);
  const auto launches = cu::PlanLaunches(entries, cu::Access::ReadOnly);
  BOOST_TEST_REQUIRE(launches.size() == 1u);
  const cu::TensorListMeta& meta = launches[0].meta;
  BOOST_TEST(meta.count == 2);
  BOOST_TEST(meta.offsets[0] == 0u);
  BOOST_TEST(meta.offsets[1] == 5u);
  BOOST_TEST(meta.offsets[2] == 12u);
  BOOST_TEST(meta.data[0][1] == static_cast<void*>(&storage[2]));
  BOOST_TEST(meta.dtype[0][0] == static_cast<std::uint8_t>(DataType::Float16));
  BOOST_TEST(meta.dtype[1][0] == static_cast<std::uint8_t>(DataType::Float32));
  BOOST_TEST(launches[0].blocks == 1u);
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

BOOST_AUTO_TEST_CASE(ManySmallTensorsShareBlocksAndSplitIntoLaunches) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint64_t> size(0, 3000);
  std::vector<std::uint64_t> sizes(1000);
  for (auto& s : sizes) {
    s = size(rng);
  }
  CheckCoverage(sizes);
  std::vector<std::uint8_t> storage;
  constexpr std::uint64_t kMax = cu::kMaxTensorsPerLaunch;
  constexpr std::uint64_t kLast = 44;
  const auto launches =
      cu::PlanLaunches(EntriesOfSizes(std::vector<std::uint64_t>(2 * kMax + kLast, 10), storage), cu::Access::Writes);
  BOOST_TEST_REQUIRE(launches.size() == 3u);
  BOOST_TEST(launches[0].meta.count == cu::kMaxTensorsPerLaunch);
  BOOST_TEST(launches[1].meta.count == cu::kMaxTensorsPerLaunch);
  BOOST_TEST(launches[2].meta.count == static_cast<std::int32_t>(kLast));
  const auto blocks_of = [](std::uint64_t elements) {
    return (elements + cu::kMinChunkElements - 1) / cu::kMinChunkElements;
  };
  BOOST_TEST(cu::TotalBlocks(launches) == 2 * blocks_of(kMax * 10) + blocks_of(kLast * 10));
}

BOOST_AUTO_TEST_SUITE_END()
