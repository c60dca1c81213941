// MpiProcessGroupOptions::Wait: every wait mode gives the bits of Spin (the blocking MPI calls)
// in every collective, blocking and non-blocking, for every dtype and reduction method; the
// option and MLFW_MPI_WAIT choose the mode; bad values of either are refused by name.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/MpiProcessGroup.hpp>

#include "distributed/DistributedTestUtil.hpp"

namespace dist = mlframework::distributed;
using mlframework::DataType;
using mlframework::TensorPtr;

namespace {

// Values whose sums round differently in another order, different on every rank.
std::vector<float> RankValues(std::size_t count, int rank, float salt) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = std::sin(0.29f * static_cast<float>(i) + salt) * (1.0f + 0.4f * static_cast<float>(rank)) +
                1e-3f * static_cast<float>(rank * 5 + 3) / static_cast<float>(i + 1);
  }
  return values;
}

TensorPtr Make(const std::vector<float>& values, DataType dtype) {
  return mlframework::FromVector(values, {values.size()}, dtype);
}

// The outputs of every collective of @p group on fixed inputs; `exact` marks those that must
// carry the same bits in every mode.
struct Outputs {
  std::vector<std::vector<float>> values;
  std::vector<bool> exact;
  void Add(std::vector<float> v, bool must_match) {
    values.push_back(std::move(v));
    exact.push_back(must_match);
  }
};

Outputs RunCollectives(dist::IProcessGroup& group, DataType dtype, bool reductions_exact) {
  const int world = group.WorldSize();
  const int rank = group.Rank();
  Outputs out;
  // Per-rank parts beyond the 1 MiB steps of the blocking all-to-all reductions, so the
  // sleeping modes wait for several exchanges in one call; an odd all-reduce length, so the
  // last rank's part is short.
  const std::size_t count = 150001;
  const auto input = RankValues(count * static_cast<std::size_t>(world), rank, 0.25f);
  auto scatter_in = Make(input, dtype);
  auto scattered = mlframework::Zeros({count}, dtype);
  group.ReduceScatter(*scatter_in, *scattered);
  out.Add(scattered->ToFloatVector(), reductions_exact);
  auto reduced = Make(RankValues(2 * count + 1, rank, 1.25f), dtype);
  group.AllReduce(*reduced);
  out.Add(reduced->ToFloatVector(), reductions_exact);
  auto maxima = Make(RankValues(1001, rank, 2.0f), dtype);
  group.AllReduce(*maxima, dist::ReduceOp::Max);
  out.Add(maxima->ToFloatVector(), true);  // a maximum has one answer in any order
  auto shard = Make(RankValues(count, rank, 3.0f), dtype);
  auto gathered = mlframework::Zeros({count * static_cast<std::size_t>(world)}, dtype);
  group.AllGather(*shard, *gathered);
  out.Add(gathered->ToFloatVector(), true);
  auto broadcast = Make(RankValues(4097, rank, 4.0f), dtype);
  group.Broadcast(*broadcast, world - 1);
  out.Add(broadcast->ToFloatVector(), true);
  group.Barrier();
  std::vector<double> host{0.1 * (rank + 1), 1.0 / (rank + 3), 1e16 * rank};
  group.AllReduceHost(host, dist::ReduceOp::Sum);
  out.Add(std::vector<float>(host.begin(), host.end()), world <= 2);
  // The non-blocking forms, two in flight at once.
  auto async_scattered = mlframework::Zeros({count}, dtype);
  auto async_gathered = mlframework::Zeros({count * static_cast<std::size_t>(world)}, dtype);
  auto async_reduced = Make(RankValues(2 * count + 1, rank, 1.25f), dtype);
  auto scatter_request = group.ReduceScatterAsync(*scatter_in, *async_scattered);
  auto gather_request = group.AllGatherAsync(*shard, *async_gathered);
  gather_request->Wait();
  scatter_request->Wait();
  group.AllReduceAsync(*async_reduced)->Wait();
  out.Add(async_scattered->ToFloatVector(), reductions_exact);
  out.Add(async_gathered->ToFloatVector(), true);
  out.Add(async_reduced->ToFloatVector(), reductions_exact);
  return out;
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
      {},  // the all-to-all defaults: local combines in rank order, exact in every mode
      {.HalfSum = dist::HalfReduction::UserOp, .Float32Sum = dist::Float32Reduction::Builtin},
      {.HalfSum = dist::HalfReduction::ConvertToFloat32}};
  for (std::size_t m = 0; m < methods.size(); ++m) {
    for (const DataType dtype : {DataType::Float32, DataType::BFloat16, DataType::Float16}) {
      BOOST_TEST_CONTEXT("method " << m << ", dtype " << mlframework::ToString(dtype)) {
        Outputs reference;
        for (const dist::WaitMode mode : {dist::WaitMode::Spin, dist::WaitMode::Sleep, dist::WaitMode::Hybrid}) {
          dist::MpiProcessGroupOptions options = methods[m];
          options.Wait = mode;
          dist::MpiProcessGroup group(options);
          BOOST_TEST_REQUIRE((group.Options().Wait == mode));
          // MPI's own sums may add in another order in their non-blocking form beyond two ranks.
          const bool reductions_exact = m == 0 || group.WorldSize() <= 2 || (dtype == DataType::Float32 && m == 2);
          Outputs outputs = RunCollectives(group, dtype, reductions_exact);
          if (mode == dist::WaitMode::Spin) {
            reference = std::move(outputs);
            continue;
          }
          BOOST_TEST_CONTEXT("mode " << static_cast<int>(mode)) {
            BOOST_TEST_REQUIRE(outputs.values.size() == reference.values.size());
            for (std::size_t i = 0; i < outputs.values.size(); ++i) {
              BOOST_TEST_CONTEXT("output " << i) {
                if (reference.exact[i]) {
                  BOOST_TEST(outputs.values[i] == reference.values[i], boost::test_tools::per_element());
                } else {
                  BOOST_TEST(mlfw_test::RelativeDifference(outputs.values[i], reference.values[i]) < 2e-2);
                }
              }
            }
          }
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
