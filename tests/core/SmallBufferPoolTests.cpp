// The pool small CPU tensors take their memory from (src/mlframework/backends/cpu/SmallBufferPool.hpp):
// its own instances from source, then the library's tensors through the public API, then the
// 2 MiB pages under large tensors and the pool's blocks.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/mlframework.hpp>

#include "mlframework/backends/cpu/SmallBufferPool.hpp"

using mlframework::ArgumentError;
using mlframework::backends::cpu::SmallBufferPool;

namespace {

std::byte* Bytes(void* pointer) { return static_cast<std::byte*>(pointer); }

bool Aligned(const void* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer) % SmallBufferPool::kAlignment == 0;
}

bool SameStats(const SmallBufferPool::Stats& a, const SmallBufferPool::Stats& b) {
  return a.blocks == b.blocks && a.spare_blocks == b.spare_blocks && a.live_slots == b.live_slots &&
         a.live_bytes == b.live_bytes;
}

// How many 32 KiB slots fill one block.
constexpr std::size_t kLargestPerBlock = SmallBufferPool::kBlockBytes / SmallBufferPool::kMaxBytes;

}  // namespace

BOOST_AUTO_TEST_SUITE(SmallBufferPoolUnits)

BOOST_AUTO_TEST_CASE(RequestsLieBackToBackInTheOrderMade) {
  SmallBufferPool pool;
  std::byte* a = Bytes(pool.Allocate(100));
  std::byte* b = Bytes(pool.Allocate(2000));
  std::byte* c = Bytes(pool.Allocate(64));
  std::byte* d = Bytes(pool.Allocate(1));
  BOOST_TEST(Aligned(a));
  BOOST_TEST((b == a + 128));   // 100 rounded up to two lines
  BOOST_TEST((c == b + 2048));  // 2000 rounded up to 32 lines
  BOOST_TEST((d == c + 64));
  const SmallBufferPool::Stats stats = pool.GetStats();
  BOOST_TEST(stats.blocks == 1u);
  BOOST_TEST(stats.live_slots == 4u);
  BOOST_TEST(stats.live_bytes == 128u + 2048u + 64u + 64u);
  pool.Free(a, 100);
  pool.Free(b, 2000);
  pool.Free(c, 64);
  pool.Free(d, 1);
  BOOST_TEST(pool.GetStats().live_bytes == 0u);
}

BOOST_AUTO_TEST_CASE(FreedSlotServesTheSameRoundedSizeOnly) {
  SmallBufferPool pool;
  std::byte* keep = Bytes(pool.Allocate(64));  // keeps the block from emptying
  std::byte* a = Bytes(pool.Allocate(2000));
  std::byte* b = Bytes(pool.Allocate(64));
  pool.Free(a, 2000);
  std::byte* other = Bytes(pool.Allocate(2049));  // 33 lines: not a's size, comes from the block's end
  BOOST_TEST((other == b + 64));
  std::byte* again = Bytes(pool.Allocate(1985));  // 32 lines, like a
  BOOST_TEST((again == a));
  pool.Free(again, 1985);
  pool.Free(other, 2049);
  pool.Free(b, 64);
  pool.Free(keep, 64);
  BOOST_TEST(pool.GetStats().live_slots == 0u);
}

BOOST_AUTO_TEST_CASE(EmptiedBlocksStartOverAndAreKeptUpToTheLimit) {
  SmallBufferPool pool;
  const std::size_t blocks = SmallBufferPool::kMaxSpareBlocks + 4;
  std::vector<void*> slots;
  for (std::size_t i = 0; i < blocks * kLargestPerBlock; ++i) {
    slots.push_back(pool.Allocate(SmallBufferPool::kMaxBytes));
  }
  BOOST_TEST(pool.GetStats().blocks == blocks);
  void* last_block_start = slots[(blocks - 1) * kLargestPerBlock];
  for (void* slot : slots) {
    pool.Free(slot, SmallBufferPool::kMaxBytes);
  }
  const SmallBufferPool::Stats stats = pool.GetStats();
  BOOST_TEST(stats.live_slots == 0u);
  BOOST_TEST(stats.blocks == 1u);  // the current block stays
  BOOST_TEST(stats.spare_blocks == SmallBufferPool::kMaxSpareBlocks);
  // The current block went back to its start: the next list lies back to back again.
  void* first = pool.Allocate(100);
  BOOST_TEST(first == last_block_start);
  BOOST_TEST(pool.Allocate(100) == Bytes(first) + 128);
}

BOOST_AUTO_TEST_CASE(SlotsOfAnEmptiedBlockAreNotHandedOutAgain) {
  SmallBufferPool pool;
  std::byte* head = Bytes(pool.Allocate(64));
  std::byte* slot = Bytes(pool.Allocate(1000));
  pool.Free(slot, 1000);  // a free slot of 16 lines
  pool.Free(head, 64);    // the block empties and starts over
  std::byte* fresh = Bytes(pool.Allocate(1000));
  BOOST_TEST((fresh == head));  // from the start, not the forgotten slot at head + 64
  std::byte* next = Bytes(pool.Allocate(64));
  BOOST_TEST((next == head + 1024));  // would overlap fresh had the old slot been handed out
  pool.Free(fresh, 1000);
  pool.Free(next, 64);
}

BOOST_AUTO_TEST_CASE(BadRequestsThrowAndLeaveThePoolUnchanged) {
  SmallBufferPool pool;
  void* live = pool.Allocate(256);
  void* freed = pool.Allocate(256);
  pool.Free(freed, 256);
  const SmallBufferPool::Stats before = pool.GetStats();
  auto names = [](const std::string& parameter, const std::string& value) {
    return [parameter, value](const ArgumentError& e) {
      const std::string what = e.what();
      return what.find(parameter) != std::string::npos && what.find(value) != std::string::npos;
    };
  };
  BOOST_CHECK_EXCEPTION(pool.Allocate(0), ArgumentError, names("bytes", "got 0"));
  BOOST_CHECK_EXCEPTION(pool.Allocate(SmallBufferPool::kMaxBytes + 1), ArgumentError, names("bytes", "32769"));
  BOOST_CHECK_EXCEPTION(pool.Free(live, 0), ArgumentError, names("bytes", "got 0"));
  int outside = 0;
  BOOST_CHECK_EXCEPTION(pool.Free(&outside, 4), ArgumentError, names("pointer", "never allocated"));
  BOOST_CHECK_EXCEPTION(pool.Free(freed, 256), ArgumentError, names("pointer", "freed already"));
  BOOST_CHECK_EXCEPTION(pool.Free(Bytes(live) + 64, 64), ArgumentError, names("pointer", "not memory"));
  BOOST_CHECK_EXCEPTION(pool.Free(live, 128), ArgumentError, names("bytes", "allocated with 193 to 256 bytes"));
  BOOST_TEST(SameStats(pool.GetStats(), before));
  pool.Free(live, 256);  // still live after all that
  BOOST_TEST(pool.GetStats().live_slots == 0u);
}

BOOST_AUTO_TEST_CASE(ThreadsNeverShareASlot) {
  SmallBufferPool pool;
  constexpr int kThreads = 4;
  constexpr int kRounds = 3000;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  std::vector<int> errors(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&pool, &errors, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 1);
      std::vector<std::pair<unsigned char*, std::size_t>> held;
      for (int r = 0; r < kRounds; ++r) {
        if (held.size() < 64 && rng() % 3 != 0) {
          const std::size_t bytes = 1 + rng() % SmallBufferPool::kMaxBytes;
          auto* p = static_cast<unsigned char*>(pool.Allocate(bytes));
          std::memset(p, t + 1, bytes);
          held.emplace_back(p, bytes);
        } else if (!held.empty()) {
          const std::size_t i = rng() % held.size();
          auto [p, bytes] = held[i];
          // Another thread writing into this slot would have changed a byte.
          errors[t] += static_cast<int>(std::count_if(p, p + bytes, [t](unsigned char v) { return v != t + 1; }));
          pool.Free(p, bytes);
          held[i] = held.back();
          held.pop_back();
        }
      }
      for (auto [p, bytes] : held) {
        pool.Free(p, bytes);
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  for (int t = 0; t < kThreads; ++t) {
    BOOST_TEST(errors[t] == 0, "thread " << t);
  }
  BOOST_TEST(pool.GetStats().live_slots == 0u);
}

BOOST_AUTO_TEST_SUITE_END()

// Through the library: MLFW_CPU_SMALL_POOL=0 turns the pool off (CTest runs this suite both ways).
BOOST_AUTO_TEST_SUITE(SmallTensorLayout)

BOOST_AUTO_TEST_CASE(PoolAsRequested) {
  const char* env = std::getenv("MLFW_CPU_SMALL_POOL");
  const std::string requested = env == nullptr ? "" : env;
  BOOST_TEST_MESSAGE("MLFW_CPU_SMALL_POOL='" << requested << "', pool "
                                             << (mlframework::backends::cpu::SmallTensorPool() ? "on" : "off"));
  BOOST_TEST(mlframework::backends::cpu::SmallTensorPool() == (requested != "0"));
}

BOOST_AUTO_TEST_CASE(SmallTensorsMadeInARowLieBackToBack) {
  using namespace mlframework;
  // 300 FP16 tensors of 1000 elements (2000 bytes, 2048 with the rounding), made one after
  // another with other allocations between them, as a model's parameters are.
  std::vector<TensorPtr> tensors;
  std::vector<std::vector<float>> others;
  for (int i = 0; i < 300; ++i) {
    others.emplace_back(1000 + i, 1.0f);
    tensors.push_back(Zeros({1000}, DataType::Float16));
  }
  std::size_t adjacent = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto* p = static_cast<const std::byte*>(backends::cpu::Data(*tensors[i]));
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(p) % 64 == 0u);
    if (i > 0 && p == static_cast<const std::byte*>(backends::cpu::Data(*tensors[i - 1])) + 2048) {
      ++adjacent;
    }
  }
  BOOST_TEST_MESSAGE(adjacent << " of 299 pairs back to back");
  if (backends::cpu::SmallTensorPool()) {
    BOOST_TEST(adjacent >= 298u);  // at most one step to a new block
  }
  // Whatever the layout, each tensor keeps its own values.
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    tensors[i]->CopyFromFloats(std::vector<float>(1000, static_cast<float>(i % 100)));
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    BOOST_TEST(tensors[i]->SumOfSquares() == 1000.0 * static_cast<double>((i % 100) * (i % 100)));
  }
}

BOOST_AUTO_TEST_CASE(ALargeTensorIsNotPooledAndStillAligned) {
  using namespace mlframework;
  const auto large = Zeros({SmallBufferPool::kMaxBytes / 4 + 1}, DataType::Float32);
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(backends::cpu::Data(*large)) % 64 == 0u);
  const auto empty = Zeros({0}, DataType::BFloat16);
  BOOST_TEST(empty->Size() == 0u);
  BOOST_TEST(empty->SumOfSquares() == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()

// Large tensors and the pool's blocks on 2 MiB pages (src/mlframework/backends/cpu/HugePages.hpp);
// MLFW_CPU_HUGE_PAGES=1 turns that on (CTest runs this suite both ways).
namespace {

constexpr std::size_t kTwoMiB = std::size_t{2} * 1024 * 1024;

// The VmFlags line of the mapping that holds `address`, from /proc/self/smaps; "" when there is none.
std::string VmFlagsAt(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto where = reinterpret_cast<std::uintptr_t>(address);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long start = 0;
    unsigned long long end = 0;
    char dash = 0;
    std::istringstream header(line);
    if (header >> std::hex >> start >> dash >> end && dash == '-') {
      inside = start <= where && where < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line + " ";
    }
  }
  return "";
}

// True when the kernel has transparent huge pages and does not refuse them outright.
bool SystemHasHugePages() {
  std::ifstream enabled("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  return std::getline(enabled, modes) && modes.find("[never]") == std::string::npos;
}

bool AdvisedHuge(const void* address) { return VmFlagsAt(address).find(" hg ") != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_SUITE(HugePageTensors)

BOOST_AUTO_TEST_CASE(HugePagesAsRequested) {
  const char* env = std::getenv("MLFW_CPU_HUGE_PAGES");
  const std::string requested = env == nullptr ? "" : env;
  BOOST_TEST_MESSAGE("MLFW_CPU_HUGE_PAGES='" << requested << "', huge pages "
                                             << (mlframework::backends::cpu::HugePages() ? "on" : "off") << ", system "
                                             << (SystemHasHugePages() ? "has them" : "has none"));
  BOOST_TEST(mlframework::backends::cpu::HugePages() == (requested == "1"));
}

BOOST_AUTO_TEST_CASE(LargeTensorsStartOnA2MiBBoundaryAndAskForHugePages) {
  using namespace mlframework;
  const bool on = backends::cpu::HugePages();
  // 3 MiB of FP32 and exactly 2 MiB of BF16: each holds at least one whole 2 MiB page.
  for (const auto& [count, dtype] : {std::pair{std::size_t{3} * 256 * 1024, DataType::Float32},
                                     std::pair{std::size_t{1024} * 1024, DataType::BFloat16}}) {
    const TensorPtr tensor = Zeros({count}, dtype);
    const void* data = backends::cpu::Data(*tensor);
    const auto address = reinterpret_cast<std::uintptr_t>(data);
    BOOST_TEST(address % 64 == 0u);
    if (on) {
      BOOST_TEST(address % kTwoMiB == 0u);
    }
    if (SystemHasHugePages()) {
      BOOST_TEST(AdvisedHuge(data) == on, "mapping at " << data << ": '" << VmFlagsAt(data) << "'");
    }
    // Wherever the memory lies, the tensor keeps its values.
    std::vector<float> values(count);
    for (std::size_t i = 0; i < count; ++i) {
      values[i] = static_cast<float>(i % 256);
    }
    tensor->CopyFromFloats(values);
    BOOST_TEST(tensor->ToFloatVector() == values);
  }
}

BOOST_AUTO_TEST_CASE(TensorsUnder2MiBKeepSmallPages) {
  using namespace mlframework;
  // One byte short of a whole 2 MiB page: 64-byte aligned, no advice asked for its mapping
  // (malloc's own, which it may share with other small allocations).
  const TensorPtr tensor = Zeros({kTwoMiB / 2 - 1}, DataType::Float16);
  const void* data = backends::cpu::Data(*tensor);
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(data) % 64 == 0u);
  if (SystemHasHugePages()) {
    BOOST_TEST(!AdvisedHuge(data), "mapping at " << data << ": '" << VmFlagsAt(data) << "'");
  }
}

BOOST_AUTO_TEST_CASE(PoolBlocksAskForHugePages) {
  using namespace mlframework;
  if (!backends::cpu::SmallTensorPool() || !SystemHasHugePages()) {
    BOOST_TEST_MESSAGE("no pool or no transparent huge pages here: nothing to check");
    return;
  }
  const TensorPtr small = Zeros({100}, DataType::Float32);
  const void* data = backends::cpu::Data(*small);
  BOOST_TEST(AdvisedHuge(data) == backends::cpu::HugePages(), "mapping at " << data << ": '" << VmFlagsAt(data) << "'");
}

BOOST_AUTO_TEST_SUITE_END()
