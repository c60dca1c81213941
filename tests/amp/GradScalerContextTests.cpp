// GradScalerContext: the RAII iteration, including destruction without a step.
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/ITrainingObserver.hpp>

#include "NonFinite.hpp"
#include "amp/AmpTestUtil.hpp"

using namespace mlframework;
using namespace mlfw_test;
using mlframework::amp::DynamicScalerConfig;
using mlframework::amp::GradScaler;
using mlframework::amp::GradScalerContext;
using mlframework::amp::StepMode;

BOOST_AUTO_TEST_SUITE(GradScalerContextTests)

BOOST_AUTO_TEST_CASE(ScalesTheLossAndSteps) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  RecordingOptimizer opt(Grads(DataType::Float16, 8.0f));
  {
    GradScalerContext ctx(scaler, Scalar(0.5f));
    BOOST_TEST(Values(ctx.ScaledLoss())[0] == 4.0f);
    BOOST_TEST(ctx.Step(opt));
  }
  BOOST_TEST(opt.steps == 1);
  BOOST_TEST(Values(opt.stepped_with.at("a"))[1] == -2.0f);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
}

BOOST_AUTO_TEST_CASE(OverflowSkipsAndBacksOff) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  RecordingOptimizer opt(PoisonedGrads(DataType::Float16, kInf));
  {
    GradScalerContext ctx(scaler, Scalar(1.0f));
    BOOST_TEST(!ctx.Step(opt));
  }
  BOOST_TEST(opt.steps == 0);
  BOOST_TEST(scaler.CurrentScale() == 4.0f);
}

BOOST_AUTO_TEST_CASE(StepWithManualUpdate) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
  RecordingOptimizer opt(Grads(DataType::Float32, 8.0f));
  {
    GradScalerContext ctx(scaler, Scalar(1.0f));
    BOOST_TEST(ctx.Step(opt, StepMode::DeferUpdate));
    BOOST_TEST(opt.steps == 1);  // the optimizer stepped
    BOOST_TEST(scaler.CurrentScale() == 8.0f);
  }
  BOOST_TEST(scaler.CurrentScale() == 8.0f);  // leaving the scope did not update either
  scaler.Update();
  BOOST_TEST(scaler.CurrentScale() == 16.0f);
  RecordingOptimizer opt2(Grads(DataType::Float32, 16.0f));
  {
    GradScalerContext ctx(scaler, Scalar(1.0f));
    BOOST_TEST(ctx.Step(opt2, StepMode::StepAndUpdate));
  }
  BOOST_TEST(scaler.GetStats()->TotalSteps == 2);
}

// One StepMode, one meaning: the same mode does the same on GradScaler and on the context.
BOOST_AUTO_TEST_CASE(EveryStepModeMeansTheSameOnTheScalerAndTheContext) {
  for (const StepMode mode : {StepMode::StepAndUpdate, StepMode::DeferUpdate, StepMode::DeferStepAndUpdate}) {
    BOOST_TEST_CONTEXT("mode " << static_cast<int>(mode)) {
      GradScaler direct(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
      GradScaler scoped(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
      RecordingOptimizer a(Grads(DataType::Float32, 8.0f));
      RecordingOptimizer b(Grads(DataType::Float32, 8.0f));
      direct.Scale(Scalar(1.0f));
      BOOST_TEST(direct.Step(a, mode));
      GradScalerContext ctx(scoped, Scalar(1.0f));
      BOOST_TEST(ctx.Step(b, mode));
      BOOST_TEST(a.steps == (mode == StepMode::DeferStepAndUpdate ? 0 : 1));
      BOOST_TEST(b.steps == a.steps);
      BOOST_TEST(direct.CurrentScale() == (mode == StepMode::StepAndUpdate ? 16.0f : 8.0f));
      BOOST_TEST(scoped.CurrentScale() == direct.CurrentScale());
      BOOST_TEST(direct.State() == scoped.State());
      if (mode != StepMode::StepAndUpdate) {
        direct.Update();
        scoped.Update();
        BOOST_TEST(direct.CurrentScale() == 16.0f);
        BOOST_TEST(scoped.CurrentScale() == 16.0f);
      }
    }
  }
  // A value that is no StepMode is refused, naming the parameter; nothing changes.
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  RecordingOptimizer opt(Grads(DataType::Float32, 8.0f));
  scaler.Scale(Scalar(1.0f));
  ExpectRefused<ArgumentError>(
      scaler, [&] { scaler.Step(opt, static_cast<StepMode>(7)); }, "mode");
  BOOST_TEST(opt.steps == 0);
  BOOST_TEST(scaler.Step(opt));
}

BOOST_AUTO_TEST_CASE(SteppingTwiceOrAfterDisposeIsAnError) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  RecordingOptimizer opt(Grads(DataType::Float32, 8.0f));
  GradScalerContext ctx(scaler, Scalar(1.0f));
  ctx.Step(opt);
  const auto before = scaler.StateDict();
  BOOST_CHECK_THROW(ctx.Step(opt), InvalidOperationError);
  BOOST_TEST((scaler.StateDict() == before));
  BOOST_TEST(opt.steps == 1);
  GradScalerContext other(scaler, Scalar(1.0f));
  other.Dispose();
  other.Dispose();  // idempotent
  BOOST_CHECK_THROW(other.Step(opt), InvalidOperationError);
  BOOST_CHECK_THROW(GradScalerContext(scaler, nullptr), ArgumentNullError);
}

BOOST_AUTO_TEST_CASE(ExceptionInBackwardLeavesTheScalerConsistent) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  const auto before = scaler.StateDict();
  RecordingOptimizer opt(Grads(DataType::Float32, 8.0f));
  try {
    GradScalerContext ctx(scaler, Scalar(1.0f));
    throw std::runtime_error("backward failed");
  } catch (const std::runtime_error&) {
  }
  BOOST_TEST((scaler.StateDict() == before));  // no half-applied update
  // The next iteration runs normally and updates exactly once.
  {
    GradScalerContext ctx(scaler, Scalar(1.0f));
    BOOST_TEST(ctx.Step(opt));
  }
  BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
  BOOST_TEST(opt.steps == 1);
}

BOOST_AUTO_TEST_CASE(EarlyExitAfterAnOverflowCheckIsAbandoned) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  const auto before = scaler.StateDict();
  for (int i = 0; i < 2; ++i) {
    GradScalerContext ctx(scaler, Scalar(1.0f));
    const auto grads = PoisonedGrads(DataType::Float16, kInf);
    scaler.Unscale(grads);
    if (scaler.CheckOverflow(grads)) {
      continue;  // leaves the scope without a step
    }
  }
  BOOST_TEST((scaler.StateDict() == before));  // no scale update, no pending result
  RecordingOptimizer opt(Grads(DataType::Float16, 8.0f));
  {
    GradScalerContext ctx(scaler, Scalar(1.0f));
    scaler.Unscale(opt.GetGradients());  // starts clean: not "unscaled twice"
    BOOST_TEST(ctx.Step(opt));
  }
  BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
  BOOST_TEST(scaler.GetStats()->TotalOverflows == 0);
}

BOOST_AUTO_TEST_CASE(UpdateBeforeAnEarlyExitKeepsTheBackoff) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  {
    GradScalerContext ctx(scaler, Scalar(1.0f));
    const auto grads = PoisonedGrads(DataType::Float32, kInf);
    if (scaler.CheckOverflow(grads)) {
      scaler.Update();  // record the overflow in the scale before leaving the scope
    }
  }
  BOOST_TEST(scaler.CurrentScale() == 4.0f);
  BOOST_TEST(scaler.GetStats()->TotalOverflows == 1);
  RecordingOptimizer opt(Grads(DataType::Float32, 4.0f));
  GradScalerContext ctx(scaler, Scalar(1.0f));
  BOOST_TEST(ctx.Step(opt));
}

// An observer's exception reaches the caller after the scaler stepped the optimizer and
// committed the iteration: the context records the step. Fails when it does not: leaving the
// context then abandons the finished iteration, which forgets that its gradients were unscaled
// and applied, so stepping them again unscales and applies them twice.
BOOST_AUTO_TEST_CASE(AStepWhoseObserverThrowsCountsAsAStep) {
  struct ThrowingObserver : ITrainingObserver {
    void OnStep(const StepEvent& /*event*/) override { throw std::runtime_error("observer failed"); }
  };
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  scaler.AddObserver(std::make_shared<ThrowingObserver>());
  RecordingOptimizer opt(Grads(DataType::Float32, 8.0f));
  {
    GradScalerContext ctx(scaler, Scalar(1.0f));
    BOOST_CHECK_THROW(ctx.Step(opt), std::runtime_error);
    BOOST_TEST(opt.steps == 1);  // the scaler stepped the optimizer before notifying
    BOOST_CHECK_EXCEPTION(ctx.Step(opt), InvalidOperationError, [](const InvalidOperationError& e) {
      BOOST_TEST_MESSAGE(e.what());
      return std::string(e.what()).find("GradScalerContext::Step() called twice") != std::string::npos;
    });
  }
  BOOST_CHECK_THROW(scaler.Step(opt), InvalidOperationError);  // the same gradients, already applied
  BOOST_TEST(opt.steps == 1);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
}

BOOST_AUTO_TEST_SUITE_END()
