// MpiProcessGroupOptions::Wait: every wait mode gives the bits of Spin in every collective,
// blocking and non-blocking, for every dtype and reduction method (MPI's own sums included, at
// any number of ranks: the sleeping modes only change how a rank waits). The option, else
// MLFW_MPI_WAIT, chooses the mode; bad values of either are refused by name.
#include <boost/test/unit_test.hpp>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/MpiProcessGroup.hpp>

#include "distributed/DistributedTestUtil.hpp"

namespace dist = mlframework::distributed;
using mlframework::DataType;
using mlframework::TensorPtr;

namespace {

using mlfw_test::Make;
using mlfw_test::RankValues;

// The outputs of every collective of @p group on fixed inputs, as bit patterns (the host
// all-reduce's doubles too), so a comparison is exact.
std::vector<std::vector<std::uint64_t>> RunCollectives(dist::IProcessGroup& group, DataType dtype) {
  const int world = group.WorldSize();
  const int rank = group.Rank();
  std::vector<std::vector<std::uint64_t>> out;
  const auto add = [&out](const mlframework::ITensor& tensor) {
    const std::vector<float> values = tensor.ToFloatVector();
    std::vector<std::uint64_t> bits;
    bits.reserve(values.size());
    for (const float value : values) bits.push_back(std::bit_cast<std::uint32_t>(value));
    out.push_back(std::move(bits));
  };
  const std::size_t count = 150001;
  const auto input = RankValues(count * static_cast<std::size_t>(world), rank, 0.25f);
  auto scatter_in = Make(input, dtype);
  auto scattered = mlframework::Zeros({count}, dtype);
  group.ReduceScatter(*scatter_in, *scattered);
  add(*scattered);
  auto reduced = Make(RankValues(2 * count + 1, rank, 1.25f), dtype);
  group.AllReduce(*reduced);
  add(*reduced);
  auto maxima = Make(RankValues(1001, rank, 2.0f), dtype);
  group.AllReduce(*maxima, dist::ReduceOp::Max);
  add(*maxima);  // a maximum has one answer in any order
  auto shard = Make(RankValues(count, rank, 3.0f), dtype);
  auto gathered = mlframework::Zeros({count * static_cast<std::size_t>(world)}, dtype);
  group.AllGather(*shard, *gathered);
  add(*gathered);
  auto broadcast = Make(RankValues(4097, rank, 4.0f), dtype);
  group.Broadcast(*broadcast, world - 1);
  add(*broadcast);
  group.Barrier();
  // Doubles that round differently when added in another order (beyond two ranks).
  std::vector<double> host{0.1 * (rank + 1), 1.0 / (rank + 3), 1e16 * rank + 1.0};
  group.AllReduceHost(host, dist::ReduceOp::Sum);
  std::vector<std::uint64_t> host_bits;
  host_bits.reserve(host.size());
  for (const double value : host) host_bits.push_back(std::bit_cast<std::uint64_t>(value));
  out.push_back(std::move(host_bits));
  // The non-blocking forms, two in flight at once.
  auto async_scattered = mlframework::Zeros({count}, dtype);
  auto async_gathered = mlframework::Zeros({count * static_cast<std::size_t>(world)}, dtype);
  auto async_reduced = Make(RankValues(2 * count + 1, rank, 1.25f), dtype);
  auto scatter_request = group.ReduceScatterAsync(*scatter_in, *async_scattered);
  auto gather_request = group.AllGatherAsync(*shard, *async_gathered);
  gather_request->Wait();
  scatter_request->Wait();
  group.AllReduceAsync(*async_reduced)->Wait();
  add(*async_scattered);
  add(*async_gathered);
  add(*async_reduced);
  return out;
}

// CPU time of the calling thread.
double ThreadCpuSeconds() {
  std::timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

// Restores an environment variable on scope exit.
class SavedEnvironment {
 public:
  explicit SavedEnvironment(const char* name) : name_(name) {
    const char* value = std::getenv(name);
    had_ = value != nullptr;
    if (had_) value_ = value;
  }
  ~SavedEnvironment() {
    if (had_) {
      setenv(name_, value_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  SavedEnvironment(const SavedEnvironment&) = delete;
  SavedEnvironment& operator=(const SavedEnvironment&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string value_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(MpiWaitModes)

BOOST_AUTO_TEST_CASE(EveryModeGivesTheBitsOfSpin) {
  if (!dist::MpiAvailable()) {
    BOOST_TEST_MESSAGE("built without MPI: no wait modes to compare");
    return;
  }
  const std::vector<dist::MpiProcessGroupOptions> methods = {
      {},  // the all-to-all defaults
      {.HalfSum = dist::HalfReduction::UserOp, .Float32Sum = dist::Float32Reduction::Builtin},
      {.HalfSum = dist::HalfReduction::ConvertToFloat32}};
  for (std::size_t m = 0; m < methods.size(); ++m) {
    for (const DataType dtype : {DataType::Float32, DataType::BFloat16, DataType::Float16}) {
      // FP32 reads Float32Sum only: a method with the first one's Float32Sum runs FP32 as it did.
      if (m > 0 && dtype == DataType::Float32 && methods[m].Float32Sum == methods[0].Float32Sum) continue;
      BOOST_TEST_CONTEXT("method " << m << ", dtype " << mlframework::ToString(dtype)) {
        std::vector<std::vector<std::uint64_t>> reference;
        for (const dist::WaitMode mode : {dist::WaitMode::Spin, dist::WaitMode::Sleep, dist::WaitMode::Hybrid}) {
          dist::MpiProcessGroupOptions options = methods[m];
          options.Wait = mode;
          dist::MpiProcessGroup group(options);
          BOOST_TEST_REQUIRE((group.Options().Wait == mode));
          auto outputs = RunCollectives(group, dtype);
          if (mode == dist::WaitMode::Spin) {
            reference = std::move(outputs);
            continue;
          }
          BOOST_TEST_CONTEXT("mode " << static_cast<int>(mode)) {
            BOOST_TEST_REQUIRE(outputs.size() == reference.size());
            for (std::size_t i = 0; i < outputs.size(); ++i) {
              BOOST_TEST_CONTEXT("output " << i) {
                BOOST_TEST(outputs[i] == reference[i], boost::test_tools::per_element());
              }
            }
          }
        }
      }
    }
  }
}

// The point of the sleeping modes: a rank that waits for a late peer uses little CPU time.
BOOST_AUTO_TEST_CASE(SleepingRanksLeaveTheirCoreWhileWaiting) {
  if (!dist::MpiAvailable()) return;
  for (const dist::WaitMode mode : {dist::WaitMode::Sleep, dist::WaitMode::Hybrid}) {
    dist::MpiProcessGroup group({.Wait = mode});
    if (group.WorldSize() < 2) return;
    constexpr double kLate = 0.3;  // seconds rank 0 arrives after the others
    for (int collective = 0; collective < 2; ++collective) {
      BOOST_TEST_CONTEXT("mode " << static_cast<int>(mode) << ", collective " << collective) {
        // Three waits, the same number on every rank (the collectives must match): a rank that
        // the loaded machine deschedules after the barrier for most of kLate measures a short
        // wait, which says nothing about its CPU use. The CPU bound holds on every wait that
        // lasted, and at least one of the three must last.
        int measured = 0;
        for (int attempt = 0; attempt < 3; ++attempt) {
          group.Barrier();
          if (group.Rank() == 0) std::this_thread::sleep_for(std::chrono::duration<double>(kLate));
          const double cpu_before = ThreadCpuSeconds();
          const auto wall_before = std::chrono::steady_clock::now();
          if (collective == 0) {
            group.Barrier();
          } else {
            auto tensor = Make(RankValues(100000, group.Rank(), 5.0f), DataType::Float32);
            group.AllReduce(*tensor);
          }
          const double cpu = ThreadCpuSeconds() - cpu_before;
          const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_before).count();
          if (group.Rank() != 0 && wall > 0.5 * kLate) {
            // Polling would take the whole wait (less only where the machine is loaded); the
            // sleeping modes wake a few thousand times at most.
            ++measured;
            BOOST_TEST(cpu < 0.2 * kLate, "CPU time " << cpu << " s over a wait of " << wall << " s");
          }
        }
        if (group.Rank() != 0) {
          BOOST_TEST(measured > 0, "no wait of the three lasted half of " << kLate << " s");
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(OptionThenEnvironmentChooseTheMode) {
  if (!dist::MpiAvailable()) {
    BOOST_CHECK_THROW(dist::MpiProcessGroup({.Wait = dist::WaitMode::Sleep}), mlframework::BackendError);
    return;
  }
  const SavedEnvironment saved("MLFW_MPI_WAIT");
  unsetenv("MLFW_MPI_WAIT");
  BOOST_TEST((dist::MpiProcessGroup().Options().Wait == dist::WaitMode::Spin));
  setenv("MLFW_MPI_WAIT", "", 1);  // empty reads as unset
  BOOST_TEST((dist::MpiProcessGroup().Options().Wait == dist::WaitMode::Spin));
  setenv("MLFW_MPI_WAIT", "sleep", 1);
  BOOST_TEST((dist::MpiProcessGroup().Options().Wait == dist::WaitMode::Sleep));
  setenv("MLFW_MPI_WAIT", "hybrid", 1);
  dist::MpiProcessGroup hybrid;
  BOOST_TEST((hybrid.Options().Wait == dist::WaitMode::Hybrid));
  // A split keeps its parent's mode, whatever the environment says by then.
  setenv("MLFW_MPI_WAIT", "spin", 1);
  BOOST_TEST((dist::MpiProcessGroup().Options().Wait == dist::WaitMode::Spin));
  auto half = hybrid.Split(hybrid.Rank() % 2, hybrid.Rank());
  BOOST_TEST((dynamic_cast<dist::MpiProcessGroup&>(*half).Options().Wait == dist::WaitMode::Hybrid));
  // The option wins over the environment.
  setenv("MLFW_MPI_WAIT", "sleep", 1);
  BOOST_TEST((dist::MpiProcessGroup({.Wait = dist::WaitMode::Spin}).Options().Wait == dist::WaitMode::Spin));
}

BOOST_AUTO_TEST_CASE(BadValuesAreRefusedByName) {
  if (!dist::MpiAvailable()) return;
  const SavedEnvironment saved("MLFW_MPI_WAIT");
  for (const char* bad : {"Sleep", "fast", "spin ", "1"}) {
    setenv("MLFW_MPI_WAIT", bad, 1);
    try {
      const dist::MpiProcessGroup from_env;
      BOOST_ERROR("MLFW_MPI_WAIT=" << bad << " was accepted");
    } catch (const mlframework::ArgumentError& error) {
      const std::string what = error.what();
      BOOST_TEST(what.find("MLFW_MPI_WAIT") != std::string::npos, what);
      BOOST_TEST(what.find(std::string("'") + bad + "'") != std::string::npos, what);
    }
    // The option takes precedence over a bad environment value.
    BOOST_CHECK_NO_THROW(dist::MpiProcessGroup({.Wait = dist::WaitMode::Sleep}));
  }
  unsetenv("MLFW_MPI_WAIT");
  try {
    const dist::MpiProcessGroup bad_option({.Wait = static_cast<dist::WaitMode>(7)});
    BOOST_ERROR("WaitMode 7 was accepted");
  } catch (const mlframework::ArgumentError& error) {
    const std::string what = error.what();
    BOOST_TEST(what.find("options.Wait") != std::string::npos, what);
    BOOST_TEST(what.find('7') != std::string::npos, what);
  }
}

BOOST_AUTO_TEST_SUITE_END()
