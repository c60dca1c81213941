// FSDPMixedPrecisionManager: overflow reports agreed through the process group, and observers.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>

#include "NonFinite.hpp"
#include "core/RecordingObserver.hpp"
#include "distributed/DistributedTestUtil.hpp"

namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;
using mlframework::DataType;
using mlframework::FromVector;
using mlframework::GradientMap;
using mlfw_test::kInf;
using mlfw_test::kNaN;

namespace {

// Every rank the same names; rank r >= 1 puts a NaN at a[r] and -Inf in c, rank 0 +Inf at a[3]
// and in b[0].
GradientMap RankGradients(int rank, bool poison) {
  std::vector<float> a(8, 1.0f);
  std::vector<float> b(3, 2.0f);
  std::vector<float> c(2, 0.5f);
  if (poison) {
    if (rank == 0) {
      a[3] = kInf;
      b[0] = kInf;
    } else {
      a[static_cast<std::size_t>(rank)] = kNaN;
      c[1] = -kInf;
    }
  }
  return {{"a", FromVector(a, {8}, DataType::Float16)},
          {"b", FromVector(b, {3}, DataType::Float32)},
          {"c", FromVector(c, {2}, DataType::BFloat16)},
          {"unused", nullptr}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpOverflowReport)

BOOST_AUTO_TEST_CASE(EveryRankHoldsTheSameReport) {
  auto group = mlfw_test::WorldGroup();
  const int rank = group->Rank();
  const int world = group->WorldSize();
  fsdp::FSDP model(group);
  fsdp::FSDPMixedPrecisionManager manager({.InitialLossScale = 8.0f}, model);
  auto observer = std::make_shared<mlfw_test::RecordingObserver>();
  manager.AddObserver(observer);
  BOOST_TEST(!manager.UnscaleAndCheckOverflow(RankGradients(rank, false)));
  BOOST_TEST(!manager.LastOverflow().has_value());  // clean steps build no report
  BOOST_TEST(manager.UnscaleAndCheckOverflow(RankGradients(rank, true)));
  BOOST_TEST_REQUIRE(manager.LastOverflow().has_value());
  const mlframework::OverflowReport& report = *manager.LastOverflow();
  BOOST_TEST(report.Step == 1);
  BOOST_TEST(report.LossScale == 8.0f);
  std::vector<int> ranks(static_cast<std::size_t>(world));
  std::iota(ranks.begin(), ranks.end(), 0);
  BOOST_TEST(report.Ranks == ranks);
  const std::size_t expected_tensors = world == 1 ? 2u : 3u;
  BOOST_TEST_REQUIRE(report.Tensors.size() == expected_tensors);
  const mlframework::TensorOverflow& a = report.Tensors[0];
  BOOST_TEST(a.Name == "a");
  BOOST_TEST(a.NonFiniteCount == static_cast<std::uint64_t>(world));  // one per rank, summed
  BOOST_TEST(a.FirstIndex == (world == 1 ? 3u : 1u));                 // the smallest over the ranks
  BOOST_TEST(a.HasPosInf);
  BOOST_TEST(a.HasNaN == (world > 1));
  BOOST_TEST(a.PosInfCount == 1u);                                  // rank 0's
  BOOST_TEST(a.NaNCount == static_cast<std::uint64_t>(world - 1));  // one per other rank, summed
  BOOST_TEST(report.Tensors[1].Name == "b");
  BOOST_TEST(report.Tensors[1].NonFiniteCount == 1u);
  if (world > 1) {
    BOOST_TEST(report.Tensors[2].Name == "c");
    BOOST_TEST(report.Tensors[2].NonFiniteCount == static_cast<std::uint64_t>(world - 1));
    BOOST_TEST(report.Tensors[2].FirstIndex == 1u);
    BOOST_TEST(report.Tensors[2].HasNegInf);
    BOOST_TEST(report.Tensors[2].NegInfCount == static_cast<std::uint64_t>(world - 1));
  }
  // The same text on every rank: compare a checksum of the report through the group.
  double sum = 0.0;
  for (const char ch : report.ToString()) sum = sum * 31.0 + static_cast<unsigned char>(ch);
  sum = std::fmod(sum, 1e9);
  BOOST_TEST(group->AllReduceHost(sum, dist::ReduceOp::Max) == sum);
  BOOST_TEST(-group->AllReduceHost(-sum, dist::ReduceOp::Max) == sum);
  // Observers saw the step in order.
  BOOST_TEST(observer->events ==
             (std::vector<std::string>{"step 0", "overflow 1", "skipped 1 8", "backoff 1 8->4", "step 1 skipped"}));
  // CheckOverflow reports too, with the next step index; a clean step keeps the report.
  BOOST_TEST(manager.CheckOverflow(RankGradients(rank, true)));
  BOOST_TEST(manager.LastOverflow()->Step == 2);
  BOOST_TEST(manager.LastOverflow()->LossScale == 4.0f);
  BOOST_TEST(!manager.CheckOverflow(RankGradients(rank, false)));
  BOOST_TEST(manager.LastOverflow()->Step == 2);
  manager.ResetLossScale();
  BOOST_TEST(!manager.LastOverflow().has_value());
}

BOOST_AUTO_TEST_CASE(WithoutLossScalingTheCheckStillReports) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group);
  fsdp::FSDPMixedPrecisionManager manager({.UseLossScaling = false}, model);
  BOOST_TEST(!manager.OverflowReports());
  // Reports are opt-in (a collective): without an observer or SetOverflowReports, none.
  const int last_rank = group->WorldSize() - 1;
  BOOST_TEST(manager.UnscaleAndCheckOverflow(RankGradients(group->Rank(), group->Rank() == last_rank)));
  BOOST_TEST(!manager.LastOverflow().has_value());
  manager.SetOverflowReports(true);
  // Only the last rank holds a non-finite value: every rank reports it, with that rank.
  const int last = last_rank;
  BOOST_TEST(manager.UnscaleAndCheckOverflow(RankGradients(group->Rank(), group->Rank() == last)));
  BOOST_TEST_REQUIRE(manager.LastOverflow().has_value());
  BOOST_TEST(manager.LastOverflow()->Ranks == std::vector<int>{last});
  BOOST_TEST(manager.LastOverflow()->LossScale == 1.0f);
  BOOST_TEST(manager.LastOverflow()->Step == 1);
}

// The step index is the framework's (set, saved, restored on every rank alike); the report
// lists the gradients in the order given to SetGradientOrder().
BOOST_AUTO_TEST_CASE(StepIndexAndGradientOrderAreTheFrameworks) {
  auto group = mlfw_test::WorldGroup();
  const int rank = group->Rank();
  fsdp::FSDP model(group);
  fsdp::FSDPMixedPrecisionManager manager({.InitialLossScale = 8.0f}, model);
  manager.SetOverflowReports(true);
  manager.SetStepIndex(500);
  manager.SetGradientOrder({"b", "a"});
  BOOST_TEST(manager.GradientOrder() == (std::vector<std::string>{"b", "a"}));
  BOOST_TEST(!manager.UnscaleAndCheckOverflow(RankGradients(rank, false)));
  BOOST_TEST(manager.UnscaleAndCheckOverflow(RankGradients(rank, true)));
  BOOST_TEST_REQUIRE(manager.LastOverflow().has_value());
  BOOST_TEST(manager.LastOverflow()->Step == 501);
  BOOST_TEST_REQUIRE(manager.LastOverflow()->Tensors.size() >= 2u);
  BOOST_TEST(manager.LastOverflow()->Tensors[0].Name == "b");
  BOOST_TEST(manager.LastOverflow()->Tensors[1].Name == "a");
  BOOST_TEST(manager.StepIndex() == 502);
  const std::vector<std::byte> blob = manager.StateDict();
  fsdp::FSDPMixedPrecisionManager resumed({.InitialLossScale = 8.0f}, model);
  resumed.LoadStateDict(blob);
  BOOST_TEST(resumed.StepIndex() == 502);
  BOOST_TEST(resumed.CurrentScale() == manager.CurrentScale());
  BOOST_CHECK_THROW(resumed.SetStepIndex(-1), mlframework::ArgumentError);
  BOOST_TEST(resumed.StepIndex() == 502);
}

// An observer on rank 0 only (logging on rank 0 alone): an overflow on another rank still
// reaches it with the agreed report, and no rank waits for the others.
BOOST_AUTO_TEST_CASE(AnObserverOnOneRankOnlySeesTheAgreedReport) {
  auto group = mlfw_test::WorldGroup();
  const int rank = group->Rank();
  const int world = group->WorldSize();
  if (world < 2) return;
  fsdp::FSDP model(group);
  fsdp::FSDPMixedPrecisionManager manager({.InitialLossScale = 8.0f}, model);
  auto observer = std::make_shared<mlfw_test::RecordingObserver>();
  if (rank == 0) manager.AddObserver(observer);
  // Only the last rank overflows, in "b".
  auto gradients = [&](bool poison) {
    std::vector<float> b(3, 2.0f);
    if (poison && rank == world - 1) b[1] = kInf;
    return GradientMap{{"b", FromVector(b, {3}, DataType::Float32)}};
  };
  BOOST_TEST(!manager.UnscaleAndCheckOverflow(gradients(false)));
  BOOST_TEST(manager.UnscaleAndCheckOverflow(gradients(true)));
  BOOST_TEST(manager.CheckOverflow(gradients(true)));
  BOOST_TEST(!manager.CheckOverflow(gradients(false)));
  BOOST_TEST_REQUIRE(manager.LastOverflow().has_value());  // every rank built it
  BOOST_TEST(manager.LastOverflow()->Ranks == std::vector<int>{world - 1});
  if (rank == 0) {
    BOOST_TEST_REQUIRE(observer->reports.size() == 2u);
    BOOST_TEST(observer->reports[0].Step == 1);
    BOOST_TEST(observer->reports[1].Step == 2);
    BOOST_TEST(observer->reports[1].Ranks == std::vector<int>{world - 1});
    BOOST_TEST_REQUIRE(observer->reports[1].Tensors.size() == 1u);
    BOOST_TEST(observer->reports[1].Tensors[0].Name == "b");
  }
  group->Barrier();
}

// An FP8 gradient (or one on another device) on one rank only: every rank throws, none waits in
// the agreement, no scale changes, and the manager works afterwards.
BOOST_AUTO_TEST_CASE(AGradientRefusedOnOneRankIsRefusedOnEveryRank) {
  auto group = mlfw_test::WorldGroup();
  const int rank = group->Rank();
  if (group->WorldSize() < 2) return;
  fsdp::FSDP model(group);
  for (const bool scaling : {true, false}) {
    for (const bool amax : {false, true}) {
      fsdp::FSDPMixedPrecisionManager manager({.UseLossScaling = scaling, .InitialLossScale = 8.0f}, model);
      manager.SetAmaxTracking(amax);
      auto observer = std::make_shared<mlfw_test::RecordingObserver>();
      manager.AddObserver(observer);
      const GradientMap bad{{"g", FromVector(std::vector<float>{1.0f, 2.0f}, {2},
                                             rank == 1 ? DataType::Float8E4M3FN : DataType::Float32)}};
      const GradientMap good{{"g", FromVector(std::vector<float>{1.0f, kInf}, {2}, DataType::Float32)}};
      if (scaling) {
        BOOST_CHECK_THROW(manager.CheckOverflow(bad), mlframework::ArgumentError);
      }
      BOOST_CHECK_THROW(manager.UnscaleAndCheckOverflow(bad), mlframework::ArgumentError);
      BOOST_TEST(manager.CurrentScale() == 8.0f);
      BOOST_TEST(manager.StepIndex() == 0);
      BOOST_TEST(observer->events.empty());
      BOOST_TEST(manager.UnscaleAndCheckOverflow(good));  // the ranks still agree
      BOOST_TEST(manager.StepIndex() == 1);
    }
  }
  group->Barrier();
}

BOOST_AUTO_TEST_SUITE_END()
