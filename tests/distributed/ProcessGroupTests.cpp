// Collectives of the process group under test (MPI under mpiexec with 1, 2 or 4 ranks) on all
// three dtypes, both 16-bit reduction methods, argument errors, and the local group.
#include <boost/test/unit_test.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/AbortGuard.hpp>

#include "distributed/DistributedTestUtil.hpp"

namespace dist = mlframework::distributed;
using mlframework::DataType;
using mlframework::FromVector;
using mlframework::Zeros;
using mlfw_test::UserTensor;

namespace {

constexpr DataType kDTypes[] = {DataType::Float32, DataType::Float16, DataType::BFloat16};

// A group that records Abort() instead of ending the process (AbortGuard test).
class RecordingGroup final : public dist::IProcessGroup {
 public:
  int Rank() const noexcept override { return 0; }
  int WorldSize() const noexcept override { return world_size; }
  std::string_view BackendName() const noexcept override { return "recording"; }
  void AllGather(const mlframework::ITensor&, mlframework::ITensor&) override {}
  void ReduceScatter(const mlframework::ITensor&, mlframework::ITensor&, dist::ReduceOp) override {}
  void AllReduce(mlframework::ITensor&, dist::ReduceOp) override {}
  void Broadcast(mlframework::ITensor&, int) override {}
  void Barrier() override {}
  void AllReduceHost(std::span<double>, dist::ReduceOp) override {}
  using IProcessGroup::AllReduceHost;
  void Abort(const std::string& message) noexcept override { aborted = message; }
  std::string aborted;
  int world_size = 2;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(ProcessGroupCollectives)

BOOST_AUTO_TEST_CASE(UserTensorsAreStagedThroughHostMemory) {
  auto group = mlfw_test::WorldGroup();
  const int n = group->WorldSize();
  for (const DataType dtype : kDTypes) {
    UserTensor input(FromVector({static_cast<float>(group->Rank()) + 1.0f}, {1}, dtype));
    BOOST_REQUIRE(!mlframework::backends::cpu::IsCpuTensor(input));
    UserTensor gathered(Zeros({static_cast<std::size_t>(n)}, dtype));
    group->AllGather(input, gathered);
    for (int k = 0; k < n; ++k) BOOST_CHECK_EQUAL(gathered.ToFloatVector()[k], static_cast<float>(k) + 1.0f);
    group->AllReduce(gathered, dist::ReduceOp::Sum);
    BOOST_CHECK_EQUAL(gathered.ToFloatVector()[0], static_cast<float>(n));
    UserTensor part(Zeros({1}, dtype));
    group->ReduceScatter(gathered, part, dist::ReduceOp::Max);
    BOOST_CHECK_EQUAL(part.ToFloatVector()[0], static_cast<float>(n * (group->Rank() + 1)));
    group->Broadcast(input, 0);
    BOOST_CHECK_EQUAL(input.ToFloatVector()[0], 1.0f);
  }
}

BOOST_AUTO_TEST_CASE(UserTensorsInHostMemoryAreUsedInPlace) {
  // A framework's tensor over host memory, of no backend of ours: every collective reads and
  // writes its memory directly, with no staging copy (ITensor::HostBytes()).
  auto group = mlfw_test::WorldGroup();
  const int n = group->WorldSize();
  const auto cpu = mlframework::Device::CPU();
  for (const DataType dtype : kDTypes) {
    UserTensor input(FromVector({static_cast<float>(group->Rank()) + 1.0f}, {1}, dtype), cpu, true);
    BOOST_REQUIRE(!mlframework::backends::cpu::IsCpuTensor(input));
    BOOST_REQUIRE_EQUAL(input.HostBytes().size(), mlframework::ElementSize(dtype));
    UserTensor gathered(Zeros({static_cast<std::size_t>(n)}, dtype), cpu, true);
    group->AllGather(input, gathered);
    for (int k = 0; k < n; ++k) BOOST_CHECK_EQUAL(gathered.Peek()[k], static_cast<float>(k) + 1.0f);
    group->AllReduce(gathered, dist::ReduceOp::Sum);
    BOOST_CHECK_EQUAL(gathered.Peek()[0], static_cast<float>(n));
    UserTensor part(Zeros({1}, dtype), cpu, true);
    group->ReduceScatter(gathered, part, dist::ReduceOp::Max);
    BOOST_CHECK_EQUAL(part.Peek()[0], static_cast<float>(n * (group->Rank() + 1)));
    group->Broadcast(input, 0);
    BOOST_CHECK_EQUAL(input.Peek()[0], 1.0f);
    BOOST_CHECK_EQUAL(input.ElementCopies() + gathered.ElementCopies() + part.ElementCopies(), 0);
  }
  // Without host memory the same tensor is staged: the counter sees it.
  UserTensor staged_input(FromVector({2.0f}, {1}), cpu);
  UserTensor staged_output(Zeros({static_cast<std::size_t>(n)}), cpu);
  BOOST_CHECK(staged_input.HostBytes().empty());
  group->AllGather(staged_input, staged_output);
  BOOST_CHECK_EQUAL(staged_input.ElementCopies(), 1);   // read into a staging copy
  BOOST_CHECK_EQUAL(staged_output.ElementCopies(), 1);  // the gathered staging copy written back
  BOOST_CHECK(staged_output.Peek() == std::vector<float>(static_cast<std::size_t>(n), 2.0f));
}

BOOST_AUTO_TEST_CASE(AllGatherEveryDType) {
  auto group = mlfw_test::WorldGroup();
  const int n = group->WorldSize();
  const int r = group->Rank();
  for (const DataType dtype : kDTypes) {
    auto input = FromVector({10.0f * static_cast<float>(r), 10.0f * static_cast<float>(r) + 1.0f, -2.0f}, {3}, dtype);
    auto output = Zeros({3 * static_cast<std::size_t>(n)}, dtype);
    group->AllGather(*input, *output);
    const auto values = output->ToFloatVector();
    for (int k = 0; k < n; ++k) {
      BOOST_CHECK_EQUAL(values[std::size_t{3} * k], 10.0f * static_cast<float>(k));
      BOOST_CHECK_EQUAL(values[3 * k + 1], 10.0f * static_cast<float>(k) + 1.0f);
      BOOST_CHECK_EQUAL(values[3 * k + 2], -2.0f);
    }
  }
}

// The input may be this rank's slot of the output (how FSDP gathers): the all-gather then runs
// in place. Any other overlap of input and output is refused before communicating.
BOOST_AUTO_TEST_CASE(AllGatherInPlaceFromOwnSlot) {
  namespace cpu = mlframework::backends::cpu;
  auto group = mlfw_test::WorldGroup();
  const auto n = static_cast<std::size_t>(group->WorldSize());
  const auto r = static_cast<std::size_t>(group->Rank());
  for (const DataType dtype : kDTypes) {
    auto output = cpu::Empty({2 * n}, dtype);
    auto slot = cpu::View(output, 2 * r, {2});
    slot->CopyFromFloats(std::vector<float>{static_cast<float>(r) + 0.5f, -static_cast<float>(r)});
    group->AllGather(*slot, *output);
    const auto values = output->ToFloatVector();
    for (std::size_t k = 0; k < n; ++k) {
      BOOST_CHECK_EQUAL(values[2 * k], static_cast<float>(k) + 0.5f);
      BOOST_CHECK_EQUAL(values[2 * k + 1], -static_cast<float>(k));
    }
    if (n > 1) {
      // Shifted by one element: overlaps the output without being the slot.
      auto wrong = cpu::View(output, r == 0 ? 1 : 2 * r - 1, {2});
      BOOST_CHECK_THROW(group->AllGather(*wrong, *output), mlframework::ArgumentError);
    }
  }
}

BOOST_AUTO_TEST_CASE(ReduceScatterAndAllReduceEveryMethod) {
  for (const auto method :
       {dist::HalfReduction::AllToAll, dist::HalfReduction::UserOp, dist::HalfReduction::ConvertToFloat32}) {
    // FP32 takes the all-to-all path with the default HalfSum and MPI's own otherwise.
    const auto float32 =
        method == dist::HalfReduction::AllToAll ? dist::Float32Reduction::AllToAll : dist::Float32Reduction::Builtin;
    auto group = mlfw_test::WorldGroup({.HalfSum = method, .Float32Sum = float32});
    const int n = group->WorldSize();
    const int r = group->Rank();
    for (const DataType dtype : kDTypes) {
      // Element i of rank r holds r + 0.5 i: small halves, exact in every dtype and in the sum.
      std::vector<float> values(2 * static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(r) + 0.5f * static_cast<float>(i);
      auto input = FromVector(values, {values.size()}, dtype);
      auto output = Zeros({2}, dtype);
      group->ReduceScatter(*input, *output, dist::ReduceOp::Sum);
      const auto rank_sum = static_cast<float>(n * (n - 1)) / 2.0f;
      const auto got = output->ToFloatVector();
      for (std::size_t j = 0; j < 2; ++j) {
        const std::size_t i = 2 * static_cast<std::size_t>(r) + j;
        BOOST_CHECK_EQUAL(got[j], rank_sum + static_cast<float>(n) * 0.5f * static_cast<float>(i));
      }
      auto all = FromVector(values, {values.size()}, dtype);
      group->AllReduce(*all, dist::ReduceOp::Max);
      const auto max_values = all->ToFloatVector();
      for (std::size_t i = 0; i < values.size(); ++i) {
        BOOST_CHECK_EQUAL(max_values[i], static_cast<float>(n - 1) + 0.5f * static_cast<float>(i));
      }
      auto sum = FromVector(values, {values.size()}, dtype);
      group->AllReduce(*sum, dist::ReduceOp::Sum);
      BOOST_CHECK_EQUAL(sum->ToFloatVector()[1], rank_sum + static_cast<float>(n) * 0.5f);
    }
  }
}

// AllToAll splits an AllReduce into one part per rank: lengths that are not a multiple of the
// world size leave short or empty parts, and long ones take several pipeline steps (1 MiB of
// scratch per step) and the threaded combine.
BOOST_AUTO_TEST_CASE(AllToAllReductionsOfAnyLength) {
  auto group =
      mlfw_test::WorldGroup({.HalfSum = dist::HalfReduction::AllToAll, .Float32Sum = dist::Float32Reduction::AllToAll});
  const auto n = static_cast<std::size_t>(group->WorldSize());
  const auto r = static_cast<float>(group->Rank());
  const auto rank_sum = static_cast<float>(n * (n - 1)) / 2.0f;
  // Quarters up to 1.5 plus the rank: every sum is exact in FP16 and BF16.
  const auto value = [](std::size_t i) { return 0.25f * static_cast<float>(i % 7); };
  for (const DataType dtype : kDTypes) {
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, n - 1, 2 * n + 1, 300000 * n + 3}) {
      std::vector<float> values(count);
      for (std::size_t i = 0; i < count; ++i) values[i] = value(i) + r;
      auto sum = FromVector(values, {count}, dtype);
      group->AllReduce(*sum, dist::ReduceOp::Sum);
      auto max = FromVector(values, {count}, dtype);
      group->AllReduce(*max, dist::ReduceOp::Max);
      const auto sums = sum->ToFloatVector();
      const auto maxima = max->ToFloatVector();
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) {
        wrong += sums[i] != static_cast<float>(n) * value(i) + rank_sum ? 1 : 0;
        wrong += maxima[i] != value(i) + static_cast<float>(n - 1) ? 1 : 0;
      }
      BOOST_CHECK_MESSAGE(wrong == 0, ToString(dtype) << " count " << count << ": " << wrong << " wrong");
      // Reduce-scatter of the same words: this rank's part of the sums.
      const std::size_t part = count / n;
      auto input =
          FromVector(std::vector<float>(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(part * n)),
                     {part * n}, dtype);
      auto output = Zeros({part}, dtype);
      group->ReduceScatter(*input, *output, dist::ReduceOp::Sum);
      const auto got = output->ToFloatVector();
      const std::size_t first = part * static_cast<std::size_t>(group->Rank());
      for (std::size_t j = 0; j < part; ++j) wrong += got[j] != sums[first + j] ? 1 : 0;
      BOOST_CHECK_MESSAGE(wrong == 0, ToString(dtype)
                                          << " reduce-scatter of " << part * n << ": " << wrong << " wrong");
    }
  }
}

BOOST_AUTO_TEST_CASE(HalfSumsRoundLikeFp32AndOverflowToInfinity) {
  for (const auto method :
       {dist::HalfReduction::AllToAll, dist::HalfReduction::UserOp, dist::HalfReduction::ConvertToFloat32}) {
    auto group = mlfw_test::WorldGroup({.HalfSum = method});
    const int n = group->WorldSize();
    // 2048 + 1 per rank: FP16 has 11 significant bits, so 2048 + n rounds to an even number.
    auto t = FromVector({group->Rank() == 0 ? 2048.0f : 1.0f, 40000.0f}, {2}, DataType::Float16);
    group->AllReduce(*t, dist::ReduceOp::Sum);
    const auto got = t->ToFloatVector();
    BOOST_CHECK_GE(got[0], 2048.0f);
    BOOST_CHECK_LE(got[0], 2048.0f + static_cast<float>(n));
    if (n >= 2) {
      BOOST_CHECK(std::isinf(got[1]));  // 80000 > 65504
    } else {
      BOOST_CHECK_EQUAL(got[1], 40000.0f);
    }
  }
}

BOOST_AUTO_TEST_CASE(BroadcastBarrierAndHostReduce) {
  auto group = mlfw_test::WorldGroup();
  const int n = group->WorldSize();
  for (const DataType dtype : kDTypes) {
    auto t = FromVector({static_cast<float>(group->Rank()), 3.0f}, {2}, dtype);
    group->Broadcast(*t, n - 1);
    BOOST_CHECK_EQUAL(t->ToFloatVector()[0], static_cast<float>(n - 1));
  }
  group->Barrier();
  BOOST_CHECK_EQUAL(group->AllReduceHost(1.0, dist::ReduceOp::Sum), static_cast<double>(n));
  BOOST_CHECK_EQUAL(group->AllReduceHost(static_cast<double>(group->Rank()), dist::ReduceOp::Max),
                    static_cast<double>(n - 1));
}

BOOST_AUTO_TEST_CASE(ArgumentErrorsBeforeAnyCommunication) {
  auto group = mlfw_test::WorldGroup();
  const auto n = static_cast<std::size_t>(group->WorldSize());
  auto input = Zeros({3});
  auto wrong = Zeros({3 * n + 1});
  BOOST_CHECK_THROW(group->AllGather(*input, *wrong), mlframework::ArgumentError);
  auto half = Zeros({3 * n}, DataType::Float16);
  BOOST_CHECK_THROW(group->AllGather(*input, *half), mlframework::ArgumentError);
  BOOST_CHECK_THROW(group->ReduceScatter(*wrong, *input), mlframework::ArgumentError);
  BOOST_CHECK_THROW(group->Broadcast(*input, group->WorldSize()), mlframework::ArgumentError);
  BOOST_CHECK_THROW(group->Broadcast(*input, -1), mlframework::ArgumentError);
  // The group still works after rejected calls.
  group->Barrier();
}

BOOST_AUTO_TEST_CASE(LocalRanksShareTheCoresUnlessOmpNumThreadsIsSet) {
  const auto group = mlfw_test::WorldGroup();  // created: the share is applied by now
  BOOST_TEST_MESSAGE("rank " << group->Rank() << ": " << omp_get_max_threads() << " OpenMP threads");
  // Open MPI's launcher tells each rank how many ranks share its node.
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const char* chosen = std::getenv("OMP_NUM_THREADS");
  const int local_ranks = local != nullptr ? std::atoi(local) : 1;
  if (chosen != nullptr && *chosen != '\0') {
    BOOST_TEST(omp_get_max_threads() == std::atoi(chosen));  // the user's choice stands
  } else {
    BOOST_TEST(omp_get_max_threads() <= std::max(1, omp_get_num_procs() / local_ranks));
  }
}

BOOST_AUTO_TEST_CASE(AbortGuardAbortsOnlyWhenUnwinding) {
  RecordingGroup group;
  { dist::AbortGuard guard(group, "quiet scope"); }
  BOOST_CHECK(group.aborted.empty());
  try {
    dist::AbortGuard guard(group, "forward of layer 3");
    throw mlframework::ArgumentError("x", "rank-local failure");
  } catch (const mlframework::ArgumentError&) {
  }
  BOOST_CHECK_NE(group.aborted.find("forward of layer 3"), std::string::npos);
  // Alone in the group: the exception propagates, nothing is aborted.
  RecordingGroup alone;
  alone.world_size = 1;
  try {
    dist::AbortGuard guard(alone, "single process");
    throw mlframework::ArgumentError("x", "local failure");
  } catch (const mlframework::ArgumentError&) {
  }
  BOOST_CHECK(alone.aborted.empty());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(LocalProcessGroupTests)

BOOST_AUTO_TEST_CASE(WorldOfOne) {
  dist::LocalProcessGroup group;
  BOOST_CHECK_EQUAL(group.Rank(), 0);
  BOOST_CHECK_EQUAL(group.WorldSize(), 1);
  BOOST_CHECK_EQUAL(group.BackendName(), "local");
  for (const DataType dtype : kDTypes) {
    auto input = FromVector({1.5f, -2.0f}, {2}, dtype);
    auto output = Zeros({2}, dtype);
    group.AllGather(*input, *output);
    BOOST_CHECK(output->ToFloatVector() == input->ToFloatVector());
    auto scattered = Zeros({2}, dtype);
    group.ReduceScatter(*input, *scattered, dist::ReduceOp::Max);
    BOOST_CHECK(scattered->ToFloatVector() == input->ToFloatVector());
    group.AllReduce(*input);
    BOOST_CHECK_EQUAL(input->ToFloatVector()[0], 1.5f);
  }
  BOOST_CHECK_THROW(group.Broadcast(*Zeros({1}), 1), mlframework::ArgumentError);
  BOOST_CHECK_EQUAL(group.AllReduceHost(2.5, dist::ReduceOp::Sum), 2.5);
  BOOST_CHECK_THROW(group.AllReduce(*Zeros({1}), static_cast<dist::ReduceOp>(7)), mlframework::ArgumentError);
}

BOOST_AUTO_TEST_CASE(MpiFactoryMatchesBuild) {
  BOOST_CHECK_EQUAL(dist::MpiAvailable(), MLFW_HAS_MPI == 1);
  if (!dist::MpiAvailable()) {
    BOOST_CHECK_THROW(dist::MakeMpiProcessGroup(), mlframework::BackendError);
  } else {
    auto group = dist::MakeMpiProcessGroup();
    BOOST_CHECK_EQUAL(group->BackendName(), "mpi");
    BOOST_CHECK_THROW(dist::MpiProcessGroup({.HalfSum = static_cast<dist::HalfReduction>(9)}),
                      mlframework::ArgumentError);
    BOOST_CHECK_THROW(dist::MpiProcessGroup({.Float32Sum = static_cast<dist::Float32Reduction>(9)}),
                      mlframework::ArgumentError);
    // A Fortran handle that names no communicator: a clear error, not a crash.
    BOOST_CHECK_THROW(dist::MpiProcessGroup({.Communicator = 987654}), mlframework::Error);
    // The exit-barrier limit: finite and > 0, from the options or the environment.
    for (const double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
      BOOST_CHECK_THROW(dist::MpiProcessGroup({.FinalizeTimeoutSeconds = bad}), mlframework::ArgumentError);
    }
    BOOST_CHECK_NO_THROW(dist::MpiProcessGroup({.FinalizeTimeoutSeconds = 30.0}));
    const char* saved = std::getenv("MLFW_MPI_FINALIZE_TIMEOUT_S");
    const std::string restore = saved != nullptr ? saved : "";
    for (const char* bad : {"soon", "-5", "0", "12s", "inf"}) {
      setenv("MLFW_MPI_FINALIZE_TIMEOUT_S", bad, 1);
      try {
        const dist::MpiProcessGroup from_env;
        BOOST_ERROR("MLFW_MPI_FINALIZE_TIMEOUT_S=" << bad << " was accepted");
      } catch (const mlframework::ArgumentError& error) {
        BOOST_CHECK(std::string(error.what()).find("MLFW_MPI_FINALIZE_TIMEOUT_S") != std::string::npos);
      }
    }
    setenv("MLFW_MPI_FINALIZE_TIMEOUT_S", "45", 1);
    BOOST_CHECK_NO_THROW(dist::MpiProcessGroup());
    // The option takes precedence over a bad environment value.
    setenv("MLFW_MPI_FINALIZE_TIMEOUT_S", "soon", 1);
    BOOST_CHECK_NO_THROW(dist::MpiProcessGroup({.FinalizeTimeoutSeconds = 30.0}));
    if (saved != nullptr) {
      setenv("MLFW_MPI_FINALIZE_TIMEOUT_S", restore.c_str(), 1);
    } else {
      unsetenv("MLFW_MPI_FINALIZE_TIMEOUT_S");
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
