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
void CheckCoverage(const std::vector<std::uint64_t>& sizes) {
  std::vector<std::uint8_t> storage;
  const auto entries = EntriesOfSizes(sizes, storage);
  const auto launches = cu::PlanLaunches(entries);
  std::vector<std::vector<int>> visits(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    visits[i].assign(sizes[i], 0);
  }
  for (const cu::Launch& launch : launches) {
    BOOST_TEST_REQUIRE(launch.meta.count >= 1);
    BOOST_TEST_REQUIRE(launch.meta.count <= cu::kMaxTensorsPerLaunch);
    const std::uint64_t total = launch.meta.offsets[launch.meta.count];
    BOOST_TEST(launch.blocks == (total + cu::kChunkElements - 1) / cu::kChunkElements);
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
        BOOST_TEST(work == cu::kChunkElements);  // equal work per block
      } else {
        BOOST_TEST(work == total - block * cu::kChunkElements);
      }
    }
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    for (const int v : visits[i]) {
      BOOST_TEST_REQUIRE(v == 1);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaLaunchPlan)

BOOST_AUTO_TEST_CASE(EmptyListsAndEmptyTensorsLaunchNothing) {
  BOOST_TEST(cu::PlanLaunches({}).empty());
  std::vector<std::uint8_t> storage;
  BOOST_TEST(cu::PlanLaunches(EntriesOfSizes({0, 0, 0}, storage)).empty());
}

BOOST_AUTO_TEST_CASE(TableKeepsOrderPointersAndDtypes) {
  std::vector<std::uint8_t> storage;
  const auto entries = EntriesOfSizes({5, 0, 7}, storage);
  const auto launches = cu::PlanLaunches(entries);
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
  const std::uint64_t k = cu::kChunkElements;
  CheckCoverage({1});
  CheckCoverage({k - 1});
  CheckCoverage({k});
  CheckCoverage({k + 1});
  CheckCoverage({3 * k + 5, 1, k - 1, 2, k, 0, 17});
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
  const auto launches = cu::PlanLaunches(EntriesOfSizes(std::vector<std::uint64_t>(2 * kMax + kLast, 10), storage));
  BOOST_TEST_REQUIRE(launches.size() == 3u);
  BOOST_TEST(launches[0].meta.count == cu::kMaxTensorsPerLaunch);
  BOOST_TEST(launches[1].meta.count == cu::kMaxTensorsPerLaunch);
  BOOST_TEST(launches[2].meta.count == static_cast<std::int32_t>(kLast));
  const auto blocks_of = [](std::uint64_t elements) { return (elements + cu::kChunkElements - 1) / cu::kChunkElements; };
  BOOST_TEST(cu::TotalBlocks(launches) == 2 * blocks_of(kMax * 10) + blocks_of(kLast * 10));
}

BOOST_AUTO_TEST_SUITE_END()
