// GradScaler::LastOverflow() and observers (ITrainingObserver) through every flow.
#include <boost/test/unit_test.hpp>

#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <mlframework/core/TrainingCsvWriter.hpp>

#include "NonFinite.hpp"
#include "amp/AmpTestUtil.hpp"
#include "amp/FakeDeviceBackend.hpp"
#include "core/RecordingObserver.hpp"

using mlfw_test::DataType;
using mlfw_test::GradientMap;
using mlfw_test::Grads;
using mlfw_test::PoisonedGrads;
using mlfw_test::RecordingObserver;
using mlfw_test::RecordingOptimizer;
namespace amp = mlframework::amp;
using mlframework::amp::StepMode;

namespace {

using Strings = std::vector<std::string>;
using mlfw_test::kInf;
using mlfw_test::kNaN;

// One automatic-flow iteration on @p gradients; returns Step()'s answer.
bool Iterate(amp::GradScaler& scaler, RecordingOptimizer& optimizer, GradientMap gradients) {
  scaler.Scale(mlframework::Scalar(1.0f));
  optimizer.Load(std::move(gradients));
  return scaler.Step(optimizer);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(GradScalerObservers)

BOOST_AUTO_TEST_CASE(EventsInOrderAndAReportOnOverflowOnly) {
  for (const DataType dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
    BOOST_TEST_CONTEXT(dtype) {
      amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 1024.0f, .GrowthInterval = 2});
      auto observer = std::make_shared<RecordingObserver>();
      scaler.AddObserver(observer);
      RecordingOptimizer optimizer;
      BOOST_TEST(Iterate(scaler, optimizer, Grads(dtype, 1024.0f)));
      BOOST_TEST(Iterate(scaler, optimizer, Grads(dtype, 1024.0f)));
      BOOST_TEST(!scaler.LastOverflow().has_value());  // clean steps build no report
      BOOST_TEST(!Iterate(scaler, optimizer, PoisonedGrads(dtype, -kInf, 2048.0f)));
      BOOST_TEST(observer->events == (Strings{"step 0", "growth 1 1024->2048", "step 1", "overflow 2", "skipped 2 2048",
                                              "backoff 2 2048->1024", "step 2 skipped"}));
      BOOST_TEST_REQUIRE(scaler.LastOverflow().has_value());
      const mlframework::OverflowReport& report = *scaler.LastOverflow();
      BOOST_TEST(report.Step == 2);
      BOOST_TEST(report.LossScale == 2048.0f);
      BOOST_TEST(report.Ranks == std::vector<int>{0});
      BOOST_TEST_REQUIRE(report.Tensors.size() == 1u);
      BOOST_TEST(report.Tensors[0].Name == "a");
      BOOST_TEST(report.Tensors[0].NonFiniteCount == 1u);
      BOOST_TEST(report.Tensors[0].FirstIndex == 1u);
      BOOST_TEST(report.Tensors[0].HasNegInf);
      BOOST_TEST(!report.Tensors[0].HasPosInf);
      BOOST_TEST(observer->reports.size() == 1u);
      BOOST_TEST(observer->steps[2].LossScale == 2048.0f);
      BOOST_TEST(observer->steps[2].NewLossScale == 1024.0f);
      BOOST_TEST(!observer->steps[2].GradientNorm.has_value());
      // A later clean step keeps the last report; Reset() clears it.
      BOOST_TEST(Iterate(scaler, optimizer, Grads(dtype, 1024.0f)));
      BOOST_TEST(scaler.LastOverflow()->Step == 2);
      scaler.Reset();
      BOOST_TEST(!scaler.LastOverflow().has_value());
    }
  }
}

BOOST_AUTO_TEST_CASE(StepEventsCarryTheAmaxWhileTracked) {
  for (const DataType dtype : {DataType::Float32, DataType::Float16}) {
    BOOST_TEST_CONTEXT(dtype) {
      amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 1024.0f});
      auto observer = std::make_shared<RecordingObserver>();
      scaler.AddObserver(observer);
      RecordingOptimizer optimizer;
      BOOST_TEST(Iterate(scaler, optimizer, Grads(dtype, 1024.0f)));
      BOOST_TEST(!observer->steps.back().GradientAmax.has_value());  // tracking is off by default
      scaler.SetAmaxTracking(true);
      BOOST_TEST(Iterate(scaler, optimizer, Grads(dtype, 1024.0f)));
      BOOST_TEST_REQUIRE(observer->steps.back().GradientAmax.has_value());
      BOOST_TEST(*observer->steps.back().GradientAmax == 4.0f);  // max |g| / scale of Grads
      BOOST_TEST((observer->steps.back().GradientAmax == scaler.LastAmax()));
      // An overflowing step reports the amax of its finite values.
      BOOST_TEST(!Iterate(scaler, optimizer, PoisonedGrads(dtype, kNaN, 1024.0f)));
      BOOST_TEST(observer->steps.back().Skipped);
      BOOST_TEST((observer->steps.back().GradientAmax == std::optional<float>(4.0f)));
    }
  }
}

BOOST_AUTO_TEST_CASE(OnADeviceTheReportIsOneScanOnOverflowStepsWithAnObserver) {
  amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 16.0f});
  RecordingOptimizer optimizer;
  // Without an observer a device step keeps its one synchronisation: no scan, no report.
  {
    amp::GradScaler plain(amp::DynamicScalerConfig{.InitialScale = 16.0f});
    const std::int64_t scans = mlfw_test::FakeBackend().ScanCount();
    BOOST_TEST(
        !Iterate(plain, optimizer, GradientMap{{"w", mlfw_test::FakeTensor({1.0f, kInf}, {2}, DataType::Float16)}}));
    BOOST_TEST(mlfw_test::FakeBackend().ScanCount() == scans);
    BOOST_TEST(!plain.LastOverflow().has_value());
  }
  scaler.AddObserver(std::make_shared<RecordingObserver>());
  const auto& backend = mlfw_test::FakeBackend();
  const auto device_grads = [](float poison) {
    return GradientMap{{"w", mlfw_test::FakeTensor({1.0f, 2.0f, poison}, {3}, DataType::Float16)},
                       {"x", mlfw_test::FakeTensor({poison, poison}, {2}, DataType::Float32)}};
  };
  const std::int64_t scans = backend.ScanCount();
  for (int i = 0; i < 2; ++i) BOOST_TEST(Iterate(scaler, optimizer, device_grads(4.0f)));
  std::int64_t before = backend.SyncCount();
  BOOST_TEST(Iterate(scaler, optimizer, device_grads(4.0f)));
  const std::int64_t clean_syncs = backend.SyncCount() - before;
  BOOST_TEST(backend.ScanCount() == scans);  // nothing extra on clean steps ...
  before = backend.SyncCount();
  BOOST_TEST(!Iterate(scaler, optimizer, device_grads(kNaN)));
  BOOST_TEST(backend.ScanCount() == scans + 1);  // ... and one scan of the list on an overflow step
  // The scan's read (the scale is read anyway with an observer).
  BOOST_TEST(backend.SyncCount() - before <= clean_syncs + 1);
  BOOST_TEST_REQUIRE(scaler.LastOverflow().has_value());
  BOOST_TEST(scaler.LastOverflow()->Tensors.size() == 2u);
  BOOST_TEST(scaler.LastOverflow()->Tensors[1].Name == "x");
  BOOST_TEST(scaler.LastOverflow()->Tensors[1].NonFiniteCount == 2u);
  BOOST_TEST(scaler.LastOverflow()->Tensors[1].HasNaN);
}

BOOST_AUTO_TEST_CASE(ManualAndDeferredFlows) {
  amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 8.0f});
  auto observer = std::make_shared<RecordingObserver>();
  scaler.AddObserver(observer);
  // Manual flow: CheckOverflow reads the result; the report is built then and committed by Update().
  scaler.Scale(mlframework::Scalar(1.0f));
  const GradientMap bad = PoisonedGrads(DataType::Float16, kInf, 8.0f);
  BOOST_TEST(scaler.CheckOverflow(bad));
  BOOST_TEST(!scaler.LastOverflow().has_value());  // not before the iteration finishes
  BOOST_TEST(observer->events.empty());
  scaler.Update();
  BOOST_TEST(scaler.LastOverflow()->Step == 0);
  BOOST_TEST(observer->events == (Strings{"overflow 0", "skipped 0 8", "backoff 0 8->4", "step 0 skipped"}));
  // Unscale() then Update(): with an observer the flag is read at Update().
  observer->events.clear();
  scaler.Scale(mlframework::Scalar(1.0f));
  scaler.Unscale(PoisonedGrads(DataType::BFloat16, kNaN, 4.0f));
  scaler.Update();
  BOOST_TEST(scaler.LastOverflow()->Step == 1);
  BOOST_TEST(scaler.LastOverflow()->Tensors[0].HasNaN);
  BOOST_TEST(observer->events == (Strings{"overflow 1", "skipped 1 4", "backoff 1 4->2", "step 1 skipped"}));
  // Spec 004's manual flow skips Update() on overflow: the next Scale(loss) finishes it and notifies.
  observer->events.clear();
  scaler.Scale(mlframework::Scalar(1.0f));
  BOOST_TEST(scaler.CheckOverflow(PoisonedGrads(DataType::Float32, kInf)));
  BOOST_TEST(observer->events.empty());
  scaler.Scale(mlframework::Scalar(1.0f));
  BOOST_TEST(observer->events == (Strings{"overflow 2", "skipped 2 2", "backoff 2 2->1", "step 2 skipped"}));
  // Deferred flow: Step(opt, StepMode::DeferStepAndUpdate) then Update().
  observer->events.clear();
  RecordingOptimizer optimizer(Grads(DataType::Float16));
  BOOST_TEST(scaler.Step(optimizer, StepMode::DeferStepAndUpdate));
  BOOST_TEST(observer->events.empty());
  scaler.Update();
  BOOST_TEST(observer->events == (Strings{"step 3"}));
  // Through GradScalerContext.
  observer->events.clear();
  {
    amp::GradScalerContext context(scaler, mlframework::Scalar(1.0f));
    optimizer.Load(PoisonedGrads(DataType::Float16, kInf));
    BOOST_TEST(!context.Step(optimizer));
  }
  BOOST_TEST(observer->events.front() == "overflow 4");
  BOOST_TEST(observer->events.back() == "step 4 skipped");
  // Removed: no more events.
  BOOST_TEST(scaler.RemoveObserver(observer));
  BOOST_TEST(!scaler.RemoveObserver(observer));
  observer->events.clear();
  BOOST_TEST(!Iterate(scaler, optimizer, PoisonedGrads(DataType::Float16, kInf)));
  BOOST_TEST(observer->events.empty());
  BOOST_TEST(scaler.LastOverflow()->Step == 5);  // reports do not depend on observers
}

BOOST_AUTO_TEST_CASE(AThrowingObserverLeavesTheScalerConsistent) {
  amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 64.0f});
  auto thrower = std::make_shared<RecordingObserver>("overflow", "first failure");
  auto second_thrower = std::make_shared<RecordingObserver>("backoff", "second failure");
  auto recorder = std::make_shared<RecordingObserver>();
  scaler.AddObserver(thrower);
  scaler.AddObserver(second_thrower);
  scaler.AddObserver(recorder);
  RecordingOptimizer optimizer;
  try {
    Iterate(scaler, optimizer, PoisonedGrads(DataType::Float16, kInf, 64.0f));
    BOOST_ERROR("the observer's exception did not reach the caller");
  } catch (const std::runtime_error& error) {
    BOOST_TEST(std::string(error.what()) == "first failure");  // the first one, after all ran
  }
  const Strings all{"overflow 0", "skipped 0 64", "backoff 0 64->32", "step 0 skipped"};
  BOOST_TEST(recorder->events == all);
  BOOST_TEST(thrower->events == all);  // its later callbacks still ran
  BOOST_TEST(second_thrower->events == all);
  // The state was committed before the observers ran.
  BOOST_TEST((scaler.State() == amp::GradScaler::IterationState::Ready));
  BOOST_TEST(scaler.CurrentScale() == 32.0f);
  BOOST_TEST(scaler.LastOverflow()->Step == 0);
  BOOST_TEST(optimizer.steps == 0);
  // The next iteration runs normally.
  scaler.RemoveObserver(thrower);
  scaler.RemoveObserver(second_thrower);
  BOOST_TEST(Iterate(scaler, optimizer, Grads(DataType::Float16, 32.0f)));
  BOOST_TEST(optimizer.steps == 1);
  BOOST_TEST(recorder->events.back() == "step 1");
}

// A checkpoint taken after an overflowed check but before Update() holds the found-inf, not the
// gradients: the Update() after LoadStateDict() backs off, and the observers must hear of a
// skipped step (without a report, since there are no gradients to scan).
BOOST_AUTO_TEST_CASE(AFoundInfRestoredByLoadStateDictIsReportedAsSkipped) {
  amp::GradScaler saved(amp::DynamicScalerConfig{.InitialScale = 64.0f});
  saved.Scale(mlframework::Scalar(1.0f));
  saved.Unscale(PoisonedGrads(DataType::Float32, kInf, 64.0f));
  amp::GradScaler resumed(amp::DynamicScalerConfig{.InitialScale = 64.0f});
  auto observer = std::make_shared<RecordingObserver>();
  resumed.AddObserver(observer);
  resumed.LoadStateDict(saved.StateDict());
  resumed.Update();
  BOOST_TEST(resumed.CurrentScale() == 32.0f);
  BOOST_TEST(observer->events == (Strings{"skipped 0 64", "backoff 0 64->32", "step 0 skipped"}));
  BOOST_TEST_REQUIRE(observer->steps.size() == 1u);
  BOOST_TEST(observer->steps[0].Skipped);

  // The same through Step(): the restored found-inf skips the optimizer.
  amp::GradScaler stepped(amp::DynamicScalerConfig{.InitialScale = 64.0f});
  auto step_observer = std::make_shared<RecordingObserver>();
  stepped.AddObserver(step_observer);
  stepped.LoadStateDict(saved.StateDict());
  RecordingOptimizer optimizer(Grads(DataType::Float32, 64.0f));
  BOOST_TEST(!stepped.Step(optimizer));
  BOOST_TEST(optimizer.steps == 0);
  BOOST_TEST_REQUIRE(step_observer->steps.size() == 1u);
  BOOST_TEST(step_observer->steps[0].Skipped);
  BOOST_TEST(step_observer->steps[0].NewLossScale == 32.0f);
}

// An observer that resets the scaler from its callback (recovery when the scale collapses)
// clears LastOverflow(); the observers after it still get the step's report, whole.
BOOST_AUTO_TEST_CASE(AnObserverThatResetsTheScalerLeavesTheOthersTheReport) {
  class Resetting final : public mlframework::ITrainingObserver {
   public:
    explicit Resetting(amp::GradScaler& scaler) : scaler_(scaler) {}
    void OnOverflow(const mlframework::OverflowReport& /*report*/) override { scaler_.Reset(); }

   private:
    amp::GradScaler& scaler_;
  };
  amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 64.0f});
  scaler.AddObserver(std::make_shared<Resetting>(scaler));
  auto recorder = std::make_shared<RecordingObserver>();
  scaler.AddObserver(recorder);
  std::vector<std::string> rows;
  scaler.AddObserver(
      std::make_shared<mlframework::TrainingCsvWriter>([&](std::string_view row) { rows.emplace_back(row); }));
  GradientMap gradients;
  for (const char* name : {"a_long_parameter_name.weight", "another_long_parameter_name.bias"}) {
    gradients[name] = mlframework::FromVector({1.0f, kInf, kNaN}, {3}, DataType::Float32);
  }
  RecordingOptimizer optimizer;
  BOOST_TEST(!Iterate(scaler, optimizer, gradients));
  BOOST_TEST(!scaler.LastOverflow().has_value());  // the observer's Reset() cleared it
  BOOST_TEST_REQUIRE(recorder->reports.size() == 1u);
  BOOST_TEST_REQUIRE(recorder->reports[0].Tensors.size() == 2u);
  BOOST_TEST(recorder->reports[0].Tensors[0].Name == "a_long_parameter_name.weight");
  BOOST_TEST(recorder->reports[0].Tensors[1].NaNCount == 1u);
  BOOST_TEST_REQUIRE(rows.size() == 2u);
  BOOST_TEST(rows[1] == "0,64,1,,\"a_long_parameter_name.weight;another_long_parameter_name.bias\",32,,2,2");
}

// Disabled, the loss is not scaled: the events say the gradients were produced with scale 1
// (what GetScaleTensor() multiplied by), not the idle scaler's scale.
BOOST_AUTO_TEST_CASE(ADisabledScalerReportsTheScaleItUsed) {
  amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 65536.0f});
  scaler.Disable();
  auto observer = std::make_shared<RecordingObserver>();
  scaler.AddObserver(observer);
  RecordingOptimizer optimizer;
  BOOST_TEST(Iterate(scaler, optimizer, Grads(DataType::Float32)));
  BOOST_TEST(scaler.GetScaleTensor()->ToFloatVector() == std::vector<float>{1.0f});
  BOOST_TEST_REQUIRE(observer->steps.size() == 1u);
  BOOST_TEST(observer->steps[0].LossScale == 1.0f);
  BOOST_TEST(observer->steps[0].NewLossScale == 1.0f);
  BOOST_TEST(!observer->steps[0].Skipped);
}

// StepEvent::MinLossScale is the dynamic scaler's minimum (so OverflowLogger notes reaching it);
// a static scaler has none.
BOOST_AUTO_TEST_CASE(StepEventsCarryTheMinimumScale) {
  amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 512.0f, .MinScale = 256.0f});
  auto observer = std::make_shared<RecordingObserver>();
  scaler.AddObserver(observer);
  RecordingOptimizer optimizer;
  BOOST_TEST(!Iterate(scaler, optimizer, PoisonedGrads(DataType::Float32, kNaN)));
  BOOST_TEST_REQUIRE(observer->steps.size() == 1u);
  BOOST_TEST(observer->steps[0].NewLossScale == 256.0f);
  BOOST_TEST_REQUIRE(observer->steps[0].MinLossScale.has_value());
  BOOST_TEST(*observer->steps[0].MinLossScale == 256.0f);

  amp::GradScaler fixed = amp::GradScaler::Static(8.0f);
  auto fixed_observer = std::make_shared<RecordingObserver>();
  fixed.AddObserver(fixed_observer);
  BOOST_TEST(Iterate(fixed, optimizer, Grads(DataType::Float32)));
  BOOST_TEST_REQUIRE(fixed_observer->steps.size() == 1u);
  BOOST_TEST(!fixed_observer->steps[0].MinLossScale.has_value());
}

// The report lists the gradients in the order the framework gave (SetGradientOrder()), the
// names it did not give after them in name order; by default in name order.
BOOST_AUTO_TEST_CASE(ReportsListGradientsInTheGivenOrder) {
  const auto poisoned = [] {
    GradientMap gradients;
    for (const char* name : {"a", "b", "c", "d"}) {
      gradients[name] = mlframework::FromVector({1.0f, kInf}, {2}, DataType::Float32);
    }
    return gradients;
  };
  const auto names = [](const mlframework::OverflowReport& report) {
    Strings result;
    for (const mlframework::TensorOverflow& tensor : report.Tensors) {
      result.push_back(tensor.Name);
    }
    return result;
  };
  amp::GradScaler scaler;
  RecordingOptimizer optimizer;
  BOOST_TEST(!Iterate(scaler, optimizer, poisoned()));
  BOOST_TEST(names(*scaler.LastOverflow()) == (Strings{"a", "b", "c", "d"}));
  scaler.SetGradientOrder({"d", "b", "x"});
  BOOST_TEST(scaler.GradientOrder() == (Strings{"d", "b", "x"}));
  BOOST_TEST(!Iterate(scaler, optimizer, poisoned()));
  BOOST_TEST(names(*scaler.LastOverflow()) == (Strings{"d", "b", "a", "c"}));
  BOOST_TEST(scaler.LastOverflow()->ToString().find("d (1 Inf, first at 1), b (1 Inf") != std::string::npos,
             scaler.LastOverflow()->ToString());
}

BOOST_AUTO_TEST_SUITE_END()
