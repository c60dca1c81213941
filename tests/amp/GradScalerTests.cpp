// GradScaler: constructors, Step with overflow, the flows of spec 004, the per-iteration
// state machine and its misuse errors, Enable/Disable, GetScaleTensor, GetStats, state blobs.
#include <cmath>
#include <limits>
#include <random>

#include <boost/test/unit_test.hpp>

#include "NonFinite.hpp"
#include "amp/AmpTestUtil.hpp"

using namespace mlframework;
using namespace mlfw_test;
using mlframework::amp::DynamicLossScaler;
using mlframework::amp::DynamicScalerConfig;
using mlframework::amp::GradScaler;
using mlframework::amp::StaticLossScaler;
using mlframework::amp::StepMode;

namespace {

// A user policy: scale 8, counts calls, implements only the six members of ILossScaler.
class CountingScaler final : public amp::ILossScaler {
 public:
  float CurrentScale() const override { return scale; }
  bool IsEnabled() const override { return true; }
  TensorPtr ScaleLoss(const TensorPtr& loss) override { return loss->Multiply(scale); }
  GradientMap UnscaleGradients(const GradientMap& gradients) override {
    ++unscale_calls;
    GradientMap out;
    for (const auto& [name, g] : gradients) {
      out.emplace(name, g->CastTo(DataType::Float32)->Divide(scale));
    }
    return out;
  }
  bool CheckOverflow(const GradientMap& gradients) override {
    ++check_calls;
    for (const auto& [name, g] : gradients) {
      if (g->HasNonFinite()) {
        return true;
      }
    }
    return false;
  }
  void UpdateScale(bool overflow) override {
    ++updates;
    scale = overflow ? scale / 2.0f : scale;
  }
  float scale = 8.0f;
  int unscale_calls = 0, check_calls = 0, updates = 0;
};

DynamicLossScaler& Dyn(GradScaler& scaler) { return dynamic_cast<DynamicLossScaler&>(*scaler.Scaler()); }

template <typename F>
void ExpectInvalidOperationUnchanged(GradScaler& scaler, F&& misuse, const std::string& hint) {
  const auto before = scaler.StateDict();
  try {
    misuse();
    BOOST_FAIL("expected InvalidOperationError");
  } catch (const InvalidOperationError& e) {
    BOOST_TEST(std::string(e.what()).find(hint) != std::string::npos, "message: " << e.what());
  }
  BOOST_TEST((scaler.StateDict() == before));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(GradScalerTests)

BOOST_AUTO_TEST_CASE(DefaultConstructorCreatesADynamicScaler) {
  GradScaler scaler;
  BOOST_TEST(dynamic_cast<DynamicLossScaler*>(scaler.Scaler().get()) != nullptr);
  BOOST_TEST(scaler.CurrentScale() == 65536.0f);
  BOOST_TEST(scaler.IsEnabled());
  BOOST_REQUIRE(scaler.GetStats().has_value());
  BOOST_TEST(scaler.GetStats()->CurrentScale == 65536.0f);
  BOOST_TEST(Dyn(scaler).Config().GrowthInterval == 2000);
  GradScaler configured(DynamicScalerConfig{.InitialScale = 1024.0f, .GrowthInterval = 10});
  BOOST_TEST(configured.CurrentScale() == 1024.0f);
  BOOST_TEST(Dyn(configured).Config().GrowthInterval == 10);
  GradScaler positional = GradScaler::Dynamic(512.0f, 4.0f, 0.25f, 30, 2.0f, 4096.0f, false);
  BOOST_TEST(Dyn(positional).Config().BackoffFactor == 0.25f);
  BOOST_TEST(Dyn(positional).Config().MaxScale == 4096.0f);
  BOOST_TEST(!positional.IsEnabled());
  BOOST_CHECK_THROW(GradScaler(DynamicScalerConfig{.GrowthFactor = 1.0f}), ArgumentError);
}

BOOST_AUTO_TEST_CASE(StaticScalerConstructorWorks) {
  GradScaler scaler = GradScaler::Static(1024.0f);
  BOOST_TEST(dynamic_cast<StaticLossScaler*>(scaler.Scaler().get()) != nullptr);
  BOOST_TEST(scaler.CurrentScale() == 1024.0f);
  BOOST_TEST(scaler.IsEnabled());
  BOOST_TEST(!scaler.GetStats().has_value());
  BOOST_TEST(GradScaler::Static().CurrentScale() == 65536.0f);
  BOOST_TEST(!GradScaler::Static(2.0f, false).IsEnabled());
  for (const float bad : {0.0f, -2.0f, kInf, kNaN}) {
    BOOST_CHECK_THROW(GradScaler::Static(bad), ArgumentError);
  }
  // The scale never changes, overflow or not.
  RecordingOptimizer opt(PoisonedGrads(DataType::Float32, kInf));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(!scaler.Step(opt));
  BOOST_TEST(scaler.CurrentScale() == 1024.0f);
}

BOOST_AUTO_TEST_CASE(CustomScalerConstructorWorks) {
  auto custom = std::make_shared<CountingScaler>();
  GradScaler scaler(custom);
  BOOST_TEST(scaler.Scaler() == custom);
  BOOST_TEST(scaler.CurrentScale() == 8.0f);
  BOOST_TEST(!scaler.GetStats().has_value());
  BOOST_TEST(Values(scaler.Scale(Scalar(2.0f)))[0] == 16.0f);
  RecordingOptimizer opt(Grads(DataType::Float16, 8.0f));
  BOOST_TEST(scaler.Step(opt));
  BOOST_TEST(custom->check_calls == 1);
  BOOST_TEST(custom->unscale_calls == 1);
  BOOST_TEST(custom->updates == 1);
  BOOST_TEST(opt.steps == 1);
  BOOST_TEST(Values(opt.stepped_with.at("a")) == (std::vector<float>{1.0f, -2.0f, 0.5f}),
             boost::test_tools::per_element());
  BOOST_TEST(Values(scaler.GetScaleTensor())[0] == 8.0f);
  BOOST_CHECK_THROW(GradScaler(std::shared_ptr<amp::ILossScaler>{}), ArgumentNullError);
  // Checkpointed like the built-ins (GradScalerStateTests has the details): with ILossScaler's
  // default state blob, a scaler at the same scale restores it.
  GradScaler restored(std::make_shared<CountingScaler>());
  restored.LoadStateDict(scaler.StateDict());
  BOOST_TEST((restored.StateDict() == scaler.StateDict()));
  scaler.Disable();
  BOOST_TEST(!scaler.IsEnabled());
  BOOST_TEST(Values(scaler.GetScaleTensor())[0] == 1.0f);
  const auto loss = Scalar(3.0f);
  BOOST_TEST(scaler.Scale(loss) == loss);
  // Mid-iteration (the loss was scaled with the old setting) the switch is refused.
  BOOST_CHECK_THROW(scaler.Enable(), InvalidOperationError);
  opt.Load(PoisonedGrads(DataType::Float32, kInf));
  BOOST_TEST(scaler.Step(opt));  // disabled: never skips
  scaler.Enable();
  BOOST_TEST(scaler.IsEnabled());
  BOOST_TEST(custom->updates == 1);  // no update while disabled
}

BOOST_AUTO_TEST_CASE(StepSkipsTheOptimizerOnOverflowAndUpdatesTheScale) {
  for (const DataType dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
    GradScaler scaler(DynamicScalerConfig{.InitialScale = 64.0f, .GrowthInterval = 100});
    RecordingOptimizer opt(Grads(dtype, 64.0f));
    scaler.Scale(Scalar(1.0f));
    BOOST_TEST(scaler.Step(opt));
    BOOST_TEST(opt.steps == 1);
    const auto& applied = opt.stepped_with.at("a");
    BOOST_TEST(applied->GetDataType() == DataType::Float32);  // FP16/BF16 are handed over as FP32
    BOOST_TEST(Values(applied) == (std::vector<float>{1.0f, -2.0f, 0.5f}), boost::test_tools::per_element());
    BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
    BOOST_TEST(scaler.CurrentScale() == 64.0f);

    for (const float poison : {kInf, -kInf, kNaN}) {
      opt.Load(PoisonedGrads(dtype, poison));
      scaler.Scale(Scalar(1.0f));
      const float scale_before = scaler.CurrentScale();
      BOOST_TEST(!scaler.Step(opt));
      BOOST_TEST(opt.steps == 1);  // skipped
      BOOST_TEST(scaler.CurrentScale() == scale_before / 2.0f);
    }
    BOOST_TEST(scaler.GetStats()->TotalOverflows == 3);
    BOOST_TEST(scaler.GetStats()->SkippedSteps == 3);
    BOOST_TEST(scaler.GetStats()->TotalSteps == 4);
  }
}

BOOST_AUTO_TEST_CASE(StepWithoutOptimizerStepLeavesStepAndUpdateToTheCaller) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 2.0f, .GrowthInterval = 1});
  RecordingOptimizer opt(Grads(DataType::Float16, 2.0f));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(scaler.Step(opt, StepMode::DeferStepAndUpdate));
  BOOST_TEST(opt.steps == 0);
  BOOST_TEST(opt.set_calls == 1);  // unscaled FP32 gradients handed over
  BOOST_TEST(Values(opt.GetGradients().at("b")) == (std::vector<float>{4.0f, -0.25f}),
             boost::test_tools::per_element());
  BOOST_TEST(scaler.GetStats()->TotalSteps == 0);  // not updated yet
  ExpectInvalidOperationUnchanged(
      scaler, [&] { scaler.Step(opt, StepMode::DeferStepAndUpdate); }, "Update()");
  ExpectInvalidOperationUnchanged(
      scaler, [&] { scaler.Step(opt); }, "Update()");
  opt.Step();
  scaler.Update();
  BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
  BOOST_TEST(scaler.CurrentScale() == 4.0f);  // grew after one clean step (interval 1)
  // Overflow in the deferred flow: false, and Update() backs off.
  opt.Load(PoisonedGrads(DataType::Float16, kInf));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(!scaler.Step(opt, StepMode::DeferStepAndUpdate));
  scaler.Update();
  BOOST_TEST(scaler.CurrentScale() == 2.0f);
}

BOOST_AUTO_TEST_CASE(ManualFlowOfSpec004) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1000});
  // Clean iteration: Unscale, CheckOverflow on the same gradients (no second pass), step, Update.
  const auto grads = Grads(DataType::Float32, 8.0f);
  scaler.Scale(Scalar(1.0f));
  const auto unscaled = scaler.Unscale(grads);
  BOOST_TEST(Values(unscaled.at("a"))[1] == -2.0f);
  BOOST_TEST(!scaler.CheckOverflow(grads));
  scaler.Update();
  BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
  // Overflow: the spec's loop skips Update(); the next Scale(loss) applies the backoff once.
  const auto bad = PoisonedGrads(DataType::Float16, kNaN);
  scaler.Scale(Scalar(1.0f));
  scaler.Unscale(bad);
  BOOST_TEST(scaler.CheckOverflow(bad));
  BOOST_TEST(scaler.CurrentScale() == 8.0f);
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(scaler.CurrentScale() == 4.0f);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 2);
  BOOST_TEST(scaler.GetStats()->TotalOverflows == 1);
  // CheckOverflow alone then Update also counts one step.
  BOOST_TEST(!scaler.CheckOverflow(Grads(DataType::BFloat16)));
  scaler.Update();
  BOOST_TEST(scaler.GetStats()->TotalSteps == 3);
}

BOOST_AUTO_TEST_CASE(ScaleIsUpdatedExactlyOncePerIterationWhicheverFlow) {
  const DynamicScalerConfig config{.InitialScale = 1024.0f, .GrowthInterval = 3, .MaxScale = 1e6f};
  std::mt19937 rng(7);
  std::bernoulli_distribution overflow(0.3);
  std::vector<bool> sequence(200);
  for (auto&& o : sequence) {
    o = overflow(rng);
  }
  for (int flow = 0; flow < 4; ++flow) {
    GradScaler scaler(config);
    PlainRules model(config);
    RecordingOptimizer opt;
    int expected_steps = 0;
    for (const bool o : sequence) {
      const DataType dtype = (flow % 2 == 0) ? DataType::Float16 : DataType::Float32;
      const auto grads = o ? PoisonedGrads(dtype, kInf) : Grads(dtype, 4.0f);
      opt.Load(grads);
      scaler.Scale(Scalar(1.0f));
      if (flow == 0) {  // automatic
        BOOST_REQUIRE(scaler.Step(opt) == !o);
      } else if (flow == 1) {  // deferred
        if (scaler.Step(opt, StepMode::DeferStepAndUpdate)) {
          opt.Step();
        }
        scaler.Update();
      } else if (flow == 2) {  // manual, as spec 004 writes it (no Update() on overflow)
        const auto unscaled = scaler.Unscale(grads);
        if (!scaler.CheckOverflow(grads)) {
          opt.Load(unscaled);
          opt.Step();
          scaler.Update();
        }
      } else {  // RAII context
        amp::GradScalerContext ctx(scaler, Scalar(1.0f));
        ctx.Step(opt);
      }
      expected_steps += o ? 0 : 1;
      BOOST_REQUIRE(opt.steps == expected_steps);
      if (flow != 2) {
        model.Step(o);
        BOOST_REQUIRE(scaler.CurrentScale() == model.scale);
        BOOST_REQUIRE(scaler.GetStats()->TotalSteps == model.total);
      } else {
        model.Step(o);
        if (!o) {  // an overflow is applied at the next Scale(loss)
          BOOST_REQUIRE(scaler.CurrentScale() == model.scale);
          BOOST_REQUIRE(scaler.GetStats()->TotalSteps == model.total);
        }
      }
    }
    scaler.Scale(Scalar(1.0f));  // flushes a pending manual-flow overflow
    BOOST_TEST(scaler.GetStats()->TotalSteps == static_cast<std::int64_t>(sequence.size()));
    BOOST_TEST(scaler.GetStats()->TotalOverflows == model.overflows);
    BOOST_TEST(scaler.CurrentScale() == model.scale);
  }
}

BOOST_AUTO_TEST_CASE(ClippingFlowUnscalesOnce) {
  for (const DataType dtype : {DataType::Float32, DataType::Float16}) {
    GradScaler scaler(DynamicScalerConfig{.InitialScale = 4.0f});
    RecordingOptimizer opt(Grads(dtype, 4.0f));
    scaler.Scale(Scalar(1.0f));
    const auto unscaled = scaler.Unscale(opt.GetGradients());
    BOOST_TEST(Values(unscaled.at("a"))[0] == 1.0f);
    BOOST_TEST(scaler.Step(opt));
    BOOST_TEST(Values(opt.stepped_with.at("a")) == (std::vector<float>{1.0f, -2.0f, 0.5f}),
               boost::test_tools::per_element());
    BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
  }
}

BOOST_AUTO_TEST_CASE(MisuseIsAnInvalidOperationAndChangesNothing) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 16.0f});
  RecordingOptimizer opt(Grads(DataType::Float32, 16.0f));
  // Update with nothing recorded.
  ExpectInvalidOperationUnchanged(
      scaler, [&] { scaler.Update(); }, "no overflow check recorded");
  // Unscale twice in one iteration.
  scaler.Scale(Scalar(1.0f));
  const auto grads = opt.GetGradients();
  scaler.Unscale(grads);
  ExpectInvalidOperationUnchanged(
      scaler, [&] { scaler.Unscale(grads); }, "already called in this iteration");
  ExpectInvalidOperationUnchanged(
      scaler, [&] { scaler.Unscale(Grads(DataType::Float32)); }, "already called");
  BOOST_TEST(Values(grads.at("a"))[0] == 1.0f);  // unscaled once only
  // Step on other gradients than those unscaled.
  RecordingOptimizer other(Grads(DataType::Float32));
  ExpectInvalidOperationUnchanged(
      scaler, [&] { scaler.Step(other); }, "not this optimizer's");
  // Enable/Disable mid-iteration.
  ExpectInvalidOperationUnchanged(
      scaler, [&] { scaler.Disable(); }, "middle of an iteration");
  BOOST_TEST(scaler.Step(opt));
  // Update after Step(optimizer), which already updated (PyTorch's step, update): accepted,
  // changing nothing; a second one has nothing to apply.
  const auto after_step = scaler.StateDict();
  scaler.Update();
  BOOST_TEST((scaler.StateDict() == after_step));
  ExpectInvalidOperationUnchanged(
      scaler, [&] { scaler.Update(); }, "already updates the scale");
  // Stepping twice on the same gradients (no new backward / Scale(loss)).
  ExpectInvalidOperationUnchanged(
      scaler, [&] { scaler.Step(opt); }, "twice");
  ExpectInvalidOperationUnchanged(
      scaler, [&] { scaler.Unscale(opt.GetGradients()); }, "already unscaled");
  BOOST_TEST(Values(opt.GetGradients().at("a"))[0] == 1.0f);
  BOOST_TEST(opt.steps == 1);
  // A new iteration goes through.
  scaler.Scale(Scalar(1.0f));
  opt.Load(Grads(DataType::Float16, 16.0f));
  BOOST_TEST(scaler.Step(opt));
  BOOST_TEST(scaler.GetStats()->TotalSteps == 2);
  BOOST_CHECK_THROW(scaler.Scale(nullptr), ArgumentNullError);
}

BOOST_AUTO_TEST_CASE(EnableAndDisable) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  scaler.Disable();
  BOOST_TEST(!scaler.IsEnabled());
  BOOST_TEST(!scaler.Scaler()->IsEnabled());
  const auto loss = Scalar(2.0f);
  BOOST_TEST(scaler.Scale(loss) == loss);  // passes through
  RecordingOptimizer opt(PoisonedGrads(DataType::Float16, kInf));
  const auto grads = opt.GetGradients();
  BOOST_TEST(scaler.Step(opt));  // never skips
  BOOST_TEST(opt.steps == 1);
  BOOST_TEST(opt.stepped_with.at("a") == grads.at("a"));  // unchanged
  BOOST_TEST(scaler.GetStats()->TotalSteps == 0);
  BOOST_TEST(Values(scaler.GetScaleTensor())[0] == 1.0f);
  scaler.Enable();
  BOOST_TEST(scaler.IsEnabled());
  BOOST_TEST(Values(scaler.Scale(loss))[0] == 16.0f);
  opt.Load(Grads(DataType::Float32, 8.0f));
  BOOST_TEST(scaler.Step(opt));
  BOOST_TEST(Values(opt.stepped_with.at("b"))[0] == 4.0f);
  // Static scalers too.
  GradScaler fixed = GradScaler::Static(4.0f, false);
  BOOST_TEST(!fixed.IsEnabled());
  fixed.Enable();
  BOOST_TEST(Values(fixed.Scale(loss))[0] == 8.0f);
}

BOOST_AUTO_TEST_CASE(GetScaleTensorReturnsTheCurrentScale) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 32.0f});
  const auto t = scaler.GetScaleTensor();
  BOOST_TEST(t->Size() == 1u);
  BOOST_TEST(t->GetDataType() == DataType::Float32);
  BOOST_TEST(Values(t)[0] == 32.0f);
  BOOST_TEST(scaler.GetScaleTensor() == t);
  RecordingOptimizer opt(PoisonedGrads(DataType::Float32, kNaN));
  scaler.Scale(Scalar(1.0f));
  scaler.Step(opt);
  BOOST_TEST(Values(scaler.GetScaleTensor())[0] == 16.0f);
  GradScaler fixed = GradScaler::Static(256.0f);
  BOOST_TEST(Values(fixed.GetScaleTensor())[0] == 256.0f);
  BOOST_TEST(fixed.GetScaleTensor() == fixed.GetScaleTensor());
}

BOOST_AUTO_TEST_CASE(GetStatsReturnsAccurateValues) {
  GradScaler scaler(
      DynamicScalerConfig{.InitialScale = 64.0f, .GrowthInterval = 2, .MinScale = 2.0f, .MaxScale = 1024.0f});
  RecordingOptimizer opt;
  const bool pattern[] = {false, false, true, false, true, true, false};
  for (const bool o : pattern) {
    opt.Load(o ? PoisonedGrads(DataType::Float16, kInf) : Grads(DataType::Float16));
    scaler.Scale(Scalar(1.0f));
    scaler.Step(opt);
  }
  const auto stats = scaler.GetStats();
  BOOST_REQUIRE(stats.has_value());
  // 64 -> (2 clean) 128 -> 64 -> (1 clean) -> 32 -> 16 -> (1 clean)
  BOOST_TEST(stats->CurrentScale == 16.0f);
  BOOST_TEST(stats->TotalSteps == 7);
  BOOST_TEST(stats->TotalOverflows == 3);
  BOOST_TEST(stats->SkippedSteps == 3);
  BOOST_TEST(stats->SuccessfulSteps == 4);
  BOOST_TEST(stats->ConsecutiveOverflows == 0);
  BOOST_TEST(stats->StepsSinceLastOverflow == 1);
  BOOST_TEST(stats->MinScale == 2.0f);
  BOOST_TEST(stats->MaxScale == 1024.0f);
  BOOST_TEST(stats->GrowthInterval == 2);
  BOOST_TEST(opt.steps == 4);
}

BOOST_AUTO_TEST_CASE(ResetRestartsTheScalerAndTheIteration) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 64.0f});
  RecordingOptimizer opt(PoisonedGrads(DataType::Float32, kInf));
  scaler.Scale(Scalar(1.0f));
  scaler.Step(opt);
  scaler.Scale(Scalar(1.0f));
  scaler.Unscale(Grads(DataType::Float32));
  scaler.Reset();
  BOOST_TEST(scaler.CurrentScale() == 64.0f);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 0);
  scaler.Unscale(Grads(DataType::Float32));  // the iteration was cleared too
  GradScaler fixed = GradScaler::Static(8.0f);
  fixed.Reset();
  BOOST_TEST(fixed.CurrentScale() == 8.0f);
}

BOOST_AUTO_TEST_CASE(SaveRestoreMidRunContinuesTheSameTrajectory) {
  const DynamicScalerConfig config{.InitialScale = 256.0f, .GrowthInterval = 4, .Hysteresis = 2};
  std::mt19937 rng(3);
  std::bernoulli_distribution overflow(0.3);
  std::vector<bool> sequence(120);
  for (auto&& o : sequence) {
    o = overflow(rng);
  }
  auto run = [&](GradScaler& scaler, std::size_t from, std::size_t to, std::vector<float>* scales) {
    RecordingOptimizer opt;
    for (std::size_t i = from; i < to; ++i) {
      opt.Load(sequence[i] ? PoisonedGrads(DataType::Float16, kInf) : Grads(DataType::Float16));
      scaler.Scale(Scalar(1.0f));
      scaler.Step(opt);
      if (scales != nullptr) {
        scales->push_back(scaler.CurrentScale());
      }
    }
  };
  GradScaler a(config);
  std::vector<float> scales_a;
  run(a, 0, 50, &scales_a);
  const auto saved = a.StateDict();
  run(a, 50, 120, &scales_a);
  GradScaler b;  // default configuration: the blob restores the configuration too
  b.LoadStateDict(saved);
  std::vector<float> scales_b(scales_a.begin(), scales_a.begin() + 50);
  run(b, 50, 120, &scales_b);
  BOOST_TEST(scales_b == scales_a, boost::test_tools::per_element());
  BOOST_TEST((b.StateDict() == a.StateDict()));

  // A pending iteration (spec 004's manual flow after an overflow) survives the round trip.
  GradScaler c(config);
  c.Scale(Scalar(1.0f));
  c.Unscale(PoisonedGrads(DataType::Float32, kNaN));
  GradScaler d(config);
  d.LoadStateDict(c.StateDict());
  d.Scale(Scalar(1.0f));
  BOOST_TEST(d.GetStats()->TotalOverflows == 1);
}

BOOST_AUTO_TEST_CASE(BadBlobsAreRejectedWithoutChange) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 128.0f});
  const auto before = scaler.StateDict();
  auto blob = GradScaler(DynamicScalerConfig{.InitialScale = 2.0f}).StateDict();
  auto truncated = blob;
  truncated.resize(blob.size() - 1);
  BOOST_CHECK_THROW(scaler.LoadStateDict(truncated), ArgumentError);
  blob[20] ^= std::byte{0x04};
  BOOST_CHECK_THROW(scaler.LoadStateDict(blob), ArgumentError);
  BOOST_CHECK_THROW(scaler.LoadStateDict(GradScaler::Static(4.0f).StateDict()), ArgumentError);  // other kind
  BOOST_CHECK_THROW(scaler.LoadStateDict(DynamicLossScaler().StateDict()), ArgumentError);  // not a GradScaler blob
  BOOST_TEST((scaler.StateDict() == before));
  GradScaler fixed = GradScaler::Static(4.0f);
  GradScaler other = GradScaler::Static(16.0f, false);
  other.LoadStateDict(fixed.StateDict());
  BOOST_TEST(other.CurrentScale() == 4.0f);
  BOOST_TEST(other.IsEnabled());
}

BOOST_AUTO_TEST_CASE(MovedScalerKeepsItsState) {
  GradScaler a(DynamicScalerConfig{.InitialScale = 8.0f});
  RecordingOptimizer opt(PoisonedGrads(DataType::Float32, kInf));
  a.Scale(Scalar(1.0f));
  a.Step(opt);
  GradScaler b = std::move(a);
  BOOST_TEST(b.CurrentScale() == 4.0f);
  BOOST_TEST(b.GetStats()->TotalOverflows == 1);
}

BOOST_AUTO_TEST_SUITE_END()
