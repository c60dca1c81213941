// GradScaler's iteration state (IterationState) and its transitions and errors, and a user's
// ILossScaler driven, reported and checkpointed through the interface like the built-ins.
#include <cstring>
#include <initializer_list>
#include <limits>
#include <optional>

#include <boost/test/unit_test.hpp>

#include "NonFinite.hpp"
#include "amp/AmpTestUtil.hpp"
#include "mlframework/core/StateBlob.hpp"

using namespace mlframework;
using namespace mlfw_test;
using mlframework::amp::DynamicLossScaler;
using mlframework::amp::DynamicScalerConfig;
using mlframework::amp::GradScaler;
using mlframework::amp::StepMode;
using State = mlframework::amp::GradScaler::IterationState;

namespace {

// A user policy with state beyond Scale(): quarter on overflow, double every `interval` clean
// steps, counts its updates. It overrides the checkpoint, statistics and reset members.
class CappedScaler final : public amp::ILossScaler {
 public:
  CappedScaler(float initial, int interval) : initial_(initial), scale_(initial), interval_(interval) {}

  float CurrentScale() const override { return scale_; }
  bool IsEnabled() const override { return true; }
  TensorPtr ScaleLoss(const TensorPtr& loss) override { return loss->Multiply(scale_); }
  GradientMap UnscaleGradients(const GradientMap& gradients) override {
    GradientMap out;
    for (const auto& [name, g] : gradients) {
      out.emplace(name, g->CastTo(DataType::Float32)->Divide(scale_));
    }
    return out;
  }
  bool CheckOverflow(const GradientMap& gradients) override { return HasNonFinite(TensorList(gradients)); }
  void UpdateScale(bool overflow) override {
    ++updates_;
    if (overflow) {
      ++overflows_;
      scale_ /= 4.0f;
      clean_ = 0;
    } else if (++clean_ == interval_) {
      scale_ *= 2.0f;
      clean_ = 0;
    }
  }

  void Reset() override { *this = CappedScaler(initial_, interval_); }
  std::optional<amp::DynamicScalerStats> GetStats() const override {
    return amp::DynamicScalerStats{.CurrentScale = scale_,
                                   .StepsSinceLastOverflow = clean_,
                                   .TotalOverflows = overflows_,
                                   .TotalSteps = updates_,
                                   .SkippedSteps = overflows_,
                                   .SuccessfulSteps = updates_ - overflows_,
                                   .GrowthInterval = interval_};
  }
  // A user's own format: a tag, then the fields.
  std::vector<std::byte> StateDict() const override {
    const Fields f{kTag, scale_, clean_, updates_, overflows_};
    std::vector<std::byte> blob(sizeof(f));
    std::memcpy(blob.data(), &f, sizeof(f));
    return blob;
  }
  void LoadStateDict(std::span<const std::byte> state) override {
    Fields f{};
    if (state.size() != sizeof(f)) {
      throw ArgumentError("state", "is not a CappedScaler blob");
    }
    std::memcpy(&f, state.data(), sizeof(f));
    if (f.tag != kTag || !(f.scale > 0.0f)) {
      throw ArgumentError("state", "is not a valid CappedScaler blob");
    }
    scale_ = f.scale;
    clean_ = f.clean;
    updates_ = f.updates;
    overflows_ = f.overflows;
  }

 private:
  static constexpr std::uint32_t kTag = 0xCA99ED01;
  struct Fields {
    std::uint32_t tag;
    float scale;
    std::int64_t clean, updates, overflows;
  };
  float initial_;
  float scale_;
  int interval_;
  std::int64_t clean_ = 0, updates_ = 0, overflows_ = 0;
};

// Only the six members of spec 001.
class PlainScaler final : public amp::ILossScaler {
 public:
  explicit PlainScaler(float scale) : scale_(scale) {}
  float CurrentScale() const override { return scale_; }
  bool IsEnabled() const override { return true; }
  TensorPtr ScaleLoss(const TensorPtr& loss) override { return loss->Multiply(scale_); }
  GradientMap UnscaleGradients(const GradientMap& gradients) override {
    GradientMap out;
    for (const auto& [name, g] : gradients) {
      out.emplace(name, g->CastTo(DataType::Float32)->Divide(scale_));
    }
    return out;
  }
  bool CheckOverflow(const GradientMap& gradients) override { return HasNonFinite(TensorList(gradients)); }
  void UpdateScale(bool overflow) override { scale_ = overflow ? scale_ / 2.0f : scale_; }

 private:
  float scale_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(GradScalerStateTests)

BOOST_AUTO_TEST_CASE(EachFlowWalksTheIterationStates) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  RecordingOptimizer opt(Grads(DataType::Float16, 8.0f));
  BOOST_TEST(scaler.State() == State::Ready);
  // Automatic.
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(scaler.State() == State::LossScaled);
  BOOST_TEST(scaler.Step(opt));
  BOOST_TEST(scaler.State() == State::Ready);
  // Deferred.
  opt.Load(Grads(DataType::Float16, 8.0f));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(scaler.Step(opt, StepMode::DeferStepAndUpdate));
  BOOST_TEST(scaler.State() == State::Stepped);
  BOOST_TEST(!scaler.CheckOverflow(opt.GetGradients()));  // already unscaled: the recorded result
  BOOST_TEST(scaler.State() == State::Stepped);
  scaler.Update();
  BOOST_TEST(scaler.State() == State::Ready);
  // Manual: check, unscale, check again, Update.
  const auto grads = Grads(DataType::Float32, 8.0f);
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(!scaler.CheckOverflow(grads));
  BOOST_TEST(scaler.State() == State::Checked);
  scaler.Unscale(grads);
  BOOST_TEST(scaler.State() == State::Unscaled);
  BOOST_TEST(!scaler.CheckOverflow(grads));
  BOOST_TEST(scaler.State() == State::Unscaled);
  scaler.Update();
  BOOST_TEST(scaler.State() == State::Ready);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 3);
  // Manual without Update() on overflow: the next Scale(loss) applies it and starts LossScaled.
  scaler.Scale(Scalar(1.0f));
  scaler.Unscale(PoisonedGrads(DataType::Float32, kInf));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(scaler.State() == State::LossScaled);
  BOOST_TEST(scaler.CurrentScale() == 4.0f);
  // Reset and an abandoned context drop the iteration.
  scaler.Unscale(Grads(DataType::Float32));
  scaler.Reset();
  BOOST_TEST(scaler.State() == State::Ready);
  {
    amp::GradScalerContext ctx(scaler, Scalar(1.0f));
    BOOST_TEST(scaler.State() == State::LossScaled);
    scaler.CheckOverflow(PoisonedGrads(DataType::Float16, kInf));
    BOOST_TEST(scaler.State() == State::Checked);
  }
  BOOST_TEST(scaler.State() == State::Ready);
  BOOST_TEST(scaler.GetStats()->TotalOverflows == 0);  // dropped, not applied
}

BOOST_AUTO_TEST_CASE(CallsOutOfOrderAreRefusedInEveryState) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  RecordingOptimizer opt(Grads(DataType::Float32, 8.0f));
  // Update without a step or check, in Ready and LossScaled.
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Update(); }, "no overflow check recorded");
  scaler.Scale(Scalar(1.0f));
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Update(); }, "no overflow check recorded");
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Enable(); }, "middle of an iteration");
  // Checked: Enable/Disable refused.
  scaler.CheckOverflow(Grads(DataType::Float32));
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Disable(); }, "middle of an iteration");
  scaler.Update();
  // Unscale twice; Unscaled refuses Enable too.
  scaler.Scale(Scalar(1.0f));
  scaler.Unscale(opt.GetGradients());
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Unscale(opt.GetGradients()); }, "already called");
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Enable(); }, "middle of an iteration");
  BOOST_TEST(scaler.Step(opt, StepMode::DeferStepAndUpdate));  // the clipping flow into the deferred one
  // Stepped: a second Step (either form) and a second Unscale are refused; Update finishes.
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Step(opt, StepMode::DeferStepAndUpdate); }, "already called");
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Step(opt); }, "already called");
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Unscale(Grads(DataType::Float32)); }, "already called");
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Disable(); }, "middle of an iteration");
  scaler.Update();
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Update(); }, "no overflow check recorded");
  // Stepping the same gradients again without a new Scale(loss).
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Step(opt); }, "twice");
  // Bad input leaves the state too.
  scaler.Scale(Scalar(1.0f));
  const GradientMap with_null{{"a", nullptr}};
  ExpectRefused<ArgumentNullError>(
      scaler, [&] { scaler.Unscale(with_null); }, "");
  ExpectRefused<ArgumentNullError>(
      scaler, [&] { scaler.CheckOverflow(with_null); }, "");
  BOOST_TEST(scaler.State() == State::LossScaled);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 2);
}

BOOST_AUTO_TEST_CASE(AUserScalerIsDrivenReportedAndResetThroughTheInterface) {
  auto policy = std::make_shared<CappedScaler>(64.0f, 2);
  GradScaler scaler(policy);
  RecordingOptimizer opt;
  for (const bool overflow : {false, false, true, false}) {
    opt.Load(overflow ? PoisonedGrads(DataType::Float16, kInf) : Grads(DataType::Float16));
    scaler.Scale(Scalar(1.0f));
    BOOST_TEST(scaler.Step(opt) == !overflow);
  }
  const auto stats = scaler.GetStats();
  BOOST_REQUIRE(stats.has_value());
  BOOST_TEST(stats->CurrentScale == 32.0f);  // 64 -> 128 -> 32
  BOOST_TEST(stats->TotalSteps == 4);
  BOOST_TEST(stats->TotalOverflows == 1);
  BOOST_TEST(stats->StepsSinceLastOverflow == 1);
  scaler.Reset();
  BOOST_TEST(scaler.CurrentScale() == 64.0f);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 0);
  BOOST_TEST(!GradScaler(std::make_shared<PlainScaler>(2.0f)).GetStats().has_value());
}

BOOST_AUTO_TEST_CASE(AUserScalerIsCheckpointedThroughGradScaler) {
  const bool sequence[] = {false, false, true, false, false, false, true, true, false, false, false, false};
  auto run = [&](GradScaler& scaler, std::size_t from, std::size_t to, std::vector<float>& scales) {
    RecordingOptimizer opt;
    for (std::size_t i = from; i < to; ++i) {
      opt.Load(sequence[i] ? PoisonedGrads(DataType::Float16, kInf) : Grads(DataType::Float16));
      scaler.Scale(Scalar(1.0f));
      scaler.Step(opt);
      scales.push_back(scaler.CurrentScale());
    }
  };
  GradScaler a(std::make_shared<CappedScaler>(256.0f, 3));
  std::vector<float> scales_a;
  run(a, 0, 5, scales_a);
  const auto saved = a.StateDict();
  run(a, 5, 12, scales_a);
  GradScaler b(std::make_shared<CappedScaler>(256.0f, 3));  // a fresh policy: the blob restores its counters
  b.LoadStateDict(saved);
  std::vector<float> scales_b(scales_a.begin(), scales_a.begin() + 5);
  run(b, 5, 12, scales_b);
  BOOST_TEST(scales_b == scales_a, boost::test_tools::per_element());
  BOOST_TEST((b.StateDict() == a.StateDict()));
  BOOST_TEST(b.GetStats()->TotalSteps == 12);

  // A pending found-inf (manual flow, no Update()) and GradScaler's own switch survive.
  GradScaler c(std::make_shared<CappedScaler>(256.0f, 3));
  c.Scale(Scalar(1.0f));
  c.Unscale(PoisonedGrads(DataType::Float32, kInf));
  GradScaler d(std::make_shared<CappedScaler>(256.0f, 3));
  d.LoadStateDict(c.StateDict());
  BOOST_TEST(d.State() == State::Unscaled);
  d.Update();
  BOOST_TEST(d.CurrentScale() == 64.0f);
  GradScaler off(std::make_shared<CappedScaler>(256.0f, 3));
  off.Disable();  // CappedScaler has no switch: GradScaler's own
  GradScaler on(std::make_shared<CappedScaler>(256.0f, 3));
  on.LoadStateDict(off.StateDict());
  BOOST_TEST(!on.IsEnabled());

  // The user's LoadStateDict rejects a foreign blob; nothing changes.
  const auto before = b.StateDict();
  BOOST_CHECK_THROW(b.LoadStateDict(GradScaler().StateDict()), ArgumentError);
  BOOST_CHECK_THROW(GradScaler().LoadStateDict(before), ArgumentError);  // and the dynamic scaler a user blob
  BOOST_TEST((b.StateDict() == before));
}

BOOST_AUTO_TEST_CASE(TheDefaultCheckpointRestoresWhatItCanAndRefusesTheRest) {
  GradScaler a(std::make_shared<PlainScaler>(32.0f));
  GradScaler same(std::make_shared<PlainScaler>(32.0f));
  same.LoadStateDict(a.StateDict());  // scale and enabled flag equal: nothing to restore
  BOOST_TEST((same.StateDict() == a.StateDict()));
  // The iteration state still round-trips.
  a.Scale(Scalar(1.0f));
  a.CheckOverflow(PoisonedGrads(DataType::Float32, kInf));
  same.LoadStateDict(a.StateDict());
  BOOST_TEST(same.State() == State::Checked);
  same.Update();
  BOOST_TEST(same.CurrentScale() == 16.0f);
  // A scale the interface cannot set: a clear error, nothing changed.
  GradScaler other(std::make_shared<PlainScaler>(4.0f));
  other.Scale(Scalar(1.0f));
  ExpectRefused<InvalidOperationError>(
      other, [&] { other.LoadStateDict(same.StateDict()); }, "override");
  ExpectRefused<ArgumentError>(
      other, [&] { other.LoadStateDict(GradScaler::Static(4.0f).StateDict()); }, "amp.StaticLossScaler");
  auto blob = same.StateDict();
  blob.resize(blob.size() - 3);
  ExpectRefused<ArgumentError>(
      other, [&] { other.LoadStateDict(blob); }, "state");
}

BOOST_AUTO_TEST_CASE(VersionOneBlobsOfTheBuiltInScalersStillLoad) {
  // The layout GradScaler wrote before IterationState: kind (1 dynamic), the scaler's blob,
  // found-inf (2 = overflow), unscaled, stepped, loss scaled.
  DynamicLossScaler inner({.InitialScale = 512.0f, .GrowthInterval = 7});
  const std::vector<std::byte> inner_blob = inner.StateDict();
  mlframework::detail::BlobWriter writer("amp.GradScaler", 1);
  writer.U8(1);
  writer.U64(inner_blob.size());
  writer.Bytes(inner_blob);
  for (const std::uint8_t field : std::initializer_list<std::uint8_t>{2, 1, 0, 1}) {
    writer.U8(field);
  }
  const std::vector<std::byte> v1 = writer.Finish();
  GradScaler scaler;
  scaler.LoadStateDict(v1);
  BOOST_TEST(scaler.CurrentScale() == 512.0f);
  BOOST_TEST(scaler.State() == State::Unscaled);
  scaler.Update();  // the recorded overflow backs off once
  BOOST_TEST(scaler.CurrentScale() == 256.0f);
  BOOST_TEST(scaler.GetStats()->GrowthInterval == 7);
  // A static GradScaler refuses the dynamic scaler's blob; an inconsistent v1 iteration is refused.
  GradScaler fixed = GradScaler::Static(2.0f);
  BOOST_CHECK_THROW(fixed.LoadStateDict(v1), ArgumentError);
  mlframework::detail::BlobWriter bad("amp.GradScaler", 1);
  bad.U8(1);
  bad.U64(inner_blob.size());
  bad.Bytes(inner_blob);
  for (const std::uint8_t field : std::initializer_list<std::uint8_t>{0, 1, 0, 1}) {  // unscaled without a found-inf
    bad.U8(field);
  }
  GradScaler untouched;
  BOOST_CHECK_THROW(untouched.LoadStateDict(bad.Finish()), ArgumentError);
  BOOST_TEST(untouched.State() == State::Ready);
  BOOST_TEST(untouched.CurrentScale() == 65536.0f);
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

// An optimizer that rejects the gradients (SetGradients) or fails in Step() while `fail` says so.
class FailingOptimizer final : public amp::IOptimizer {
 public:
  enum class Fail { None, SetGradients, Step };
  explicit FailingOptimizer(GradientMap gradients) : gradients_(std::move(gradients)) {}
  GradientMap GetGradients() override { return gradients_; }
  void SetGradients(const GradientMap& gradients) override {
    if (fail == Fail::SetGradients) {
      throw ArgumentError("gradients", "rejected by the test optimizer");
    }
    gradients_ = gradients;
  }
  void Step() override {
    if (fail == Fail::Step) {
      throw InvalidOperationError("the test optimizer failed");
    }
    ++steps;
    stepped_with = gradients_;
  }
  void Load(GradientMap gradients) { gradients_ = std::move(gradients); }
  Fail fail = Fail::None;
  int steps = 0;
  GradientMap stepped_with;

 private:
  GradientMap gradients_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(GradScalerFailedStepTests)

// The optimizer throwing inside Step() leaves the scaler as before the call.
BOOST_AUTO_TEST_CASE(AFailingOptimizerRollsTheStepBack) {
  using Fail = FailingOptimizer::Fail;
  for (const bool deferred : {false, true}) {
    BOOST_TEST_CONTEXT("deferred " << deferred) {
      GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
      // FP16 gradients, rejected by SetGradients: unchanged (unscaled into other tensors), so a retry works.
      FailingOptimizer opt(Grads(DataType::Float16, 8.0f));
      opt.fail = Fail::SetGradients;
      scaler.Scale(Scalar(1.0f));
      ExpectRefused<ArgumentError>(
          scaler, [&] { scaler.Step(opt, deferred ? StepMode::DeferStepAndUpdate : StepMode::StepAndUpdate); },
          "rejected");
      BOOST_TEST(scaler.State() == State::LossScaled);
      opt.fail = Fail::None;
      BOOST_TEST(scaler.Step(opt, deferred ? StepMode::DeferStepAndUpdate : StepMode::StepAndUpdate));
      if (deferred) {
        opt.Step();
        scaler.Update();
      }
      BOOST_TEST(Values(opt.stepped_with.at("a")) == (std::vector<float>{1.0f, -2.0f, 0.5f}),
                 boost::test_tools::per_element());
      BOOST_TEST(scaler.CurrentScale() == 16.0f);
      BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
      // FP32 gradients, the optimizer's Step fails: the scaler rolls back, and the gradients it
      // unscaled in place are refused until new ones come with Scale(loss).
      if (!deferred) {
        scaler.Scale(Scalar(1.0f));
        opt.Load(Grads(DataType::Float32, 16.0f));
        opt.fail = Fail::Step;
        ExpectRefused<InvalidOperationError>(
            scaler, [&] { scaler.Step(opt); }, "test optimizer failed");
        BOOST_TEST(scaler.State() == State::LossScaled);
        opt.fail = Fail::None;
        ExpectRefused<InvalidOperationError>(
            scaler, [&] { scaler.Step(opt); }, "unscaled by a Step()");
        BOOST_TEST(opt.steps == 1);
        scaler.Scale(Scalar(1.0f));
        opt.Load(Grads(DataType::Float32, 16.0f));
        BOOST_TEST(scaler.Step(opt));
        BOOST_TEST(Values(opt.stepped_with.at("b")) == (std::vector<float>{4.0f, -0.25f}),
                   boost::test_tools::per_element());
        BOOST_TEST(scaler.GetStats()->TotalSteps == 2);
      }
    }
  }
}

// A joining optimizer that fails: the scaler is as after the first optimizer's step, and a
// retry joins the same iteration.
BOOST_AUTO_TEST_CASE(AFailingJoiningOptimizerLeavesTheFinishedIteration) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
  RecordingOptimizer o1(Grads(DataType::Float16, 8.0f));
  FailingOptimizer o2(Grads(DataType::Float16, 8.0f));
  o2.fail = FailingOptimizer::Fail::Step;
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(scaler.Step(o1));
  BOOST_TEST(scaler.CurrentScale() == 16.0f);
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Step(o2); }, "test optimizer failed");
  BOOST_TEST(scaler.CurrentScale() == 16.0f);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
  o2.fail = FailingOptimizer::Fail::None;
  BOOST_TEST(scaler.Step(o2));
  BOOST_TEST(Values(o2.stepped_with.at("a")) == (std::vector<float>{1.0f, -2.0f, 0.5f}),
             boost::test_tools::per_element());
  BOOST_TEST(scaler.CurrentScale() == 16.0f);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
}

// A checkpoint saved and loaded into the same scaler in the middle of an iteration: the blob
// holds no gradients, but the FP32 ones already unscaled in place are still in memory, so
// stepping or unscaling them again (a second division by the scale) is refused until the next
// Scale(loss); FP16 gradients were not changed and are unscaled from their source once.
BOOST_AUTO_TEST_CASE(AStateLoadedMidIterationDoesNotUnscaleTheGradientsTwice) {
  const std::vector<float> unscaled = {1.0f, -2.0f, 0.5f};
  for (const DataType dtype : {DataType::Float32, DataType::Float16}) {
    BOOST_TEST_CONTEXT(dtype) {
      GradScaler scaler(DynamicScalerConfig{.InitialScale = 16.0f});
      RecordingOptimizer opt(Grads(dtype, 16.0f));
      scaler.Scale(Scalar(1.0f));
      scaler.Unscale(opt);
      scaler.LoadStateDict(scaler.StateDict());
      if (dtype == DataType::Float32) {
        ExpectRefused<InvalidOperationError>(
            scaler, [&] { scaler.Step(opt); }, "LoadStateDict()");
        ExpectRefused<InvalidOperationError>(
            scaler, [&] { scaler.Unscale(opt); }, "LoadStateDict()");
        BOOST_TEST(opt.steps == 0);
        BOOST_TEST(Values(opt.GetGradients().at("a")) == unscaled, boost::test_tools::per_element());
      } else {
        BOOST_TEST(scaler.Step(opt));
        BOOST_TEST(Values(opt.stepped_with.at("a")) == unscaled, boost::test_tools::per_element());
      }
      // The next iteration steps as usual.
      scaler.Scale(Scalar(1.0f));
      opt.Load(Grads(dtype, scaler.CurrentScale()));
      BOOST_TEST(scaler.Step(opt));
      BOOST_TEST(Values(opt.stepped_with.at("a")) == unscaled, boost::test_tools::per_element());
    }
  }
}

// A state loaded after a deferring Step(o1): the blob holds no gradients, but o1 already stepped
// the ones in memory (FP16 ones through their unscaled FP32 copies, which o1 now holds), so
// stepping o1 again before the next Scale(loss) is refused, as without the load; another
// optimizer steps and Update() finishes the iteration once.
BOOST_AUTO_TEST_CASE(AStateLoadedAfterADeferredStepDoesNotStepTheGradientsTwice) {
  const std::vector<float> unscaled = {1.0f, -2.0f, 0.5f};
  for (const DataType dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
    BOOST_TEST_CONTEXT(dtype) {
      GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
      RecordingOptimizer o1(Grads(dtype, 8.0f));
      RecordingOptimizer o2(Grads(dtype, 8.0f));
      scaler.Scale(Scalar(1.0f));
      BOOST_TEST(scaler.Step(o1, StepMode::DeferUpdate));
      BOOST_TEST(o1.steps == 1);
      scaler.LoadStateDict(scaler.StateDict());
      ExpectRefused<InvalidOperationError>(
          scaler, [&] { scaler.Step(o1, StepMode::DeferUpdate); }, "LoadStateDict()");
      BOOST_TEST(o1.steps == 1);
      BOOST_TEST(scaler.Step(o2, StepMode::DeferUpdate));
      BOOST_TEST(Values(o2.stepped_with.at("a")) == unscaled, boost::test_tools::per_element());
      scaler.Update();
      BOOST_TEST(scaler.CurrentScale() == 16.0f);
      BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
      // The next iteration steps o1 as usual.
      scaler.Scale(Scalar(1.0f));
      o1.Load(Grads(dtype, 16.0f));
      BOOST_TEST(scaler.Step(o1));
      BOOST_TEST(o1.steps == 2);
      BOOST_TEST(Values(o1.stepped_with.at("a")) == unscaled, boost::test_tools::per_element());
    }
  }
}

// A state loaded between Step(o1) and Step(o2) of PyTorch's flow: o2's gradients were scaled with
// the iteration's scale, which the load replaced (with o1's update, or another checkpoint's
// scale), so o2 can no longer join that iteration: Step(o2) and Unscale(o2) are refused until the
// next Scale(loss), not unscaled with the loaded scale and updated a second time. Update() is
// still the PyTorch flow's trailing no-op, and o1 starts the next iteration as usual.
BOOST_AUTO_TEST_CASE(AStateLoadedBetweenTwoOptimizersStepsRefusesTheSecond) {
  const std::vector<float> unscaled = {1.0f, -2.0f, 0.5f};
  for (const DataType dtype : {DataType::Float32, DataType::Float16}) {
    BOOST_TEST_CONTEXT(dtype) {
      GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
      RecordingOptimizer o1(Grads(dtype, 8.0f));
      RecordingOptimizer o2(Grads(dtype, 8.0f));
      scaler.Scale(Scalar(1.0f));
      BOOST_TEST(scaler.Step(o1));
      BOOST_TEST(scaler.CurrentScale() == 16.0f);
      scaler.LoadStateDict(scaler.StateDict());
      ExpectRefused<InvalidOperationError>(
          scaler, [&] { scaler.Step(o2); }, "LoadStateDict()");
      ExpectRefused<InvalidOperationError>(
          scaler, [&] { scaler.Unscale(o2); }, "LoadStateDict()");
      BOOST_TEST(o2.steps == 0);
      BOOST_TEST(Values(o2.GetGradients().at("a")) == (std::vector<float>{8.0f, -16.0f, 4.0f}),
                 boost::test_tools::per_element());
      BOOST_TEST(scaler.CurrentScale() == 16.0f);
      BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
      scaler.Update();  // PyTorch's update() after the steps: accepted, nothing changes
      BOOST_TEST(scaler.CurrentScale() == 16.0f);
      // The next iteration steps both as usual.
      scaler.Scale(Scalar(1.0f));
      o1.Load(Grads(dtype, 16.0f));
      o2.Load(Grads(dtype, 16.0f));
      BOOST_TEST(scaler.Step(o1));
      BOOST_TEST(scaler.Step(o2));
      BOOST_TEST(Values(o2.stepped_with.at("a")) == unscaled, boost::test_tools::per_element());
      BOOST_TEST(scaler.CurrentScale() == 32.0f);
      BOOST_TEST(scaler.GetStats()->TotalSteps == 2);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(GradScalerFailSafeTests)

// Every member of a moved-from GradScaler is an InvalidOperationError (no crash); assigning a
// GradScaler to it makes it usable again.
BOOST_AUTO_TEST_CASE(AMovedFromScalerRefusesEveryUse) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  GradScaler moved(std::move(scaler));
  RecordingOptimizer opt(Grads(DataType::Float32, 8.0f));
  const GradientMap grads = Grads(DataType::Float32);
  const auto expect = [](auto&& use) { BOOST_CHECK_THROW(use(), InvalidOperationError); };
  // NOLINTBEGIN(bugprone-use-after-move,clang-analyzer-cplusplus.Move): the use after move is the test
  expect([&] { (void)scaler.CurrentScale(); });
  expect([&] { (void)scaler.Scale(Scalar(1.0f)); });
  expect([&] { (void)scaler.Scaler(); });
  expect([&] { (void)scaler.IsEnabled(); });
  expect([&] { (void)scaler.State(); });
  expect([&] { (void)scaler.Unscale(grads); });
  expect([&] { (void)scaler.Unscale(opt); });
  expect([&] { (void)scaler.Step(opt); });
  expect([&] { (void)scaler.Step(opt, StepMode::DeferStepAndUpdate); });
  expect([&] { scaler.Update(); });
  expect([&] { (void)scaler.CheckOverflow(grads); });
  expect([&] { scaler.Enable(); });
  expect([&] { scaler.Disable(); });
  expect([&] { scaler.Reset(); });
  expect([&] { (void)scaler.GetScaleTensor(); });
  expect([&] { (void)scaler.GetStats(); });
  expect([&] { (void)scaler.LastOverflow(); });
  expect([&] { scaler.AddObserver(nullptr); });
  expect([&] { (void)scaler.RemoveObserver(nullptr); });
  expect([&] { scaler.SetAmaxTracking(true); });
  expect([&] { (void)scaler.AmaxTracking(); });
  expect([&] { (void)scaler.LastAmax(); });
  expect([&] { (void)scaler.StateDict(); });
  expect([&] { scaler.LoadStateDict(moved.StateDict()); });
  // A context on it, or on a scaler moved from under it.
  expect([&] { amp::GradScalerContext ctx(scaler, Scalar(1.0f)); });
  {
    amp::GradScalerContext ctx(moved, Scalar(1.0f));
    GradScaler elsewhere(std::move(moved));
    expect([&] { (void)ctx.Step(opt); });
    BOOST_TEST(opt.steps == 0);
    moved = std::move(elsewhere);
  }                                                           // the destructor abandons nothing and does not crash
  BOOST_TEST(Values(opt.GetGradients().at("a"))[0] == 8.0f);  // never unscaled
  scaler = GradScaler(DynamicScalerConfig{.InitialScale = 4.0f});
  BOOST_TEST(scaler.CurrentScale() == 4.0f);
  // NOLINTEND(bugprone-use-after-move,clang-analyzer-cplusplus.Move)
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(scaler.Step(opt));
}

// Loss scaling refuses FP8 gradients: ArgumentError naming the gradient and its dtype, nothing changed.
BOOST_AUTO_TEST_CASE(Fp8GradientsAreRefusedNamingTheGradientAndTheDtype) {
  for (const DataType fp8 : {DataType::Float8E4M3FN, DataType::Float8E5M2}) {
    BOOST_TEST_CONTEXT(fp8) {
      GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
      const GradientMap grads{{"a", FromVector({1.0f, 2.0f}, {2}, DataType::Float16)},
                              {"w8", FromVector({8.0f, 16.0f}, {2}, fp8)}};
      RecordingOptimizer opt(grads);
      scaler.Scale(Scalar(1.0f));
      const std::string dtype(ToString(fp8));
      ExpectRefused<ArgumentError>(
          scaler, [&] { (void)scaler.Unscale(grads); }, "gradients[\"w8\"]': is " + dtype);
      ExpectRefused<ArgumentError>(
          scaler, [&] { (void)scaler.Unscale(opt); }, "gradients[\"w8\"]': is " + dtype);
      ExpectRefused<ArgumentError>(
          scaler, [&] { (void)scaler.Step(opt); }, "gradients[\"w8\"]': is " + dtype);
      ExpectRefused<ArgumentError>(
          scaler, [&] { (void)scaler.Step(opt, StepMode::DeferStepAndUpdate); }, "gradients[\"w8\"]': is " + dtype);
      ExpectRefused<ArgumentError>(
          scaler, [&] { (void)scaler.CheckOverflow(grads); }, "gradients[\"w8\"]': is " + dtype);
      BOOST_TEST(Values(grads.at("w8")) == (std::vector<float>{8.0f, 16.0f}), boost::test_tools::per_element());
      BOOST_TEST(opt.steps == 0);
      BOOST_TEST(scaler.State() == State::LossScaled);
    }
  }
}

// PyTorch's load_state_dict rule: the blob's configuration (growth, backoff, interval, bounds,
// hysteresis, enabled) replaces the one the scaler was built with.
BOOST_AUTO_TEST_CASE(ALoadedBlobBringsItsConfiguration) {
  const DynamicScalerConfig saved_config{.InitialScale = 512.0f,
                                         .GrowthFactor = 4.0f,
                                         .BackoffFactor = 0.25f,
                                         .GrowthInterval = 7,
                                         .MinScale = 2.0f,
                                         .MaxScale = 4096.0f,
                                         .Hysteresis = 2,
                                         .Enabled = true};
  GradScaler saved(saved_config);
  GradScaler loaded(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 100, .MaxScale = 1024.0f});
  loaded.LoadStateDict(saved.StateDict());
  const DynamicScalerConfig& config = dynamic_cast<const DynamicLossScaler&>(*loaded.Scaler()).Config();
  BOOST_TEST(config.InitialScale == saved_config.InitialScale);
  BOOST_TEST(config.GrowthFactor == saved_config.GrowthFactor);
  BOOST_TEST(config.BackoffFactor == saved_config.BackoffFactor);
  BOOST_TEST(config.GrowthInterval == saved_config.GrowthInterval);
  BOOST_TEST(config.MinScale == saved_config.MinScale);
  BOOST_TEST(config.MaxScale == saved_config.MaxScale);
  BOOST_TEST(config.Hysteresis == saved_config.Hysteresis);
  BOOST_TEST(loaded.CurrentScale() == 512.0f);
  BOOST_TEST(loaded.GetStats()->GrowthInterval == 7);
}

// The step index is the framework's: set, counted on, saved and restored (issue 38, item 4).
BOOST_AUTO_TEST_CASE(StepIndexIsSetSavedAndRestored) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 64.0f});
  RecordingOptimizer optimizer;
  BOOST_TEST(scaler.StepIndex() == 0);
  scaler.SetStepIndex(1000);
  scaler.Scale(Scalar(1.0f));
  optimizer.Load(Grads(DataType::Float32));
  scaler.Step(optimizer);
  BOOST_TEST(scaler.StepIndex() == 1001);
  scaler.Scale(Scalar(1.0f));
  optimizer.Load(PoisonedGrads(DataType::Float32, kInf));
  BOOST_TEST(!scaler.Step(optimizer));
  BOOST_TEST_REQUIRE(scaler.LastOverflow().has_value());
  BOOST_TEST(scaler.LastOverflow()->Step == 1001);

  // A new scaler loading the blob continues at the saved index (not at 0).
  const std::vector<std::byte> blob = scaler.StateDict();
  GradScaler resumed(DynamicScalerConfig{.InitialScale = 64.0f});
  resumed.LoadStateDict(blob);
  BOOST_TEST(resumed.StepIndex() == 1002);
  resumed.Scale(Scalar(1.0f));
  optimizer.Load(PoisonedGrads(DataType::Float32, kInf));
  BOOST_TEST(!resumed.Step(optimizer));
  BOOST_TEST(resumed.LastOverflow()->Step == 1002);

  // A negative index is refused, naming the parameter and the value; nothing changes.
  try {
    resumed.SetStepIndex(-3);
    BOOST_FAIL("expected an ArgumentError");
  } catch (const ArgumentError& error) {
    BOOST_TEST(error.Parameter() == "step");
    BOOST_TEST(std::string(error.what()).find("-3") != std::string::npos, error.what());
  }
  BOOST_TEST(resumed.StepIndex() == 1003);

  // A version 2 blob (no step index) still loads and keeps the scaler's index.
  DynamicLossScaler inner({.InitialScale = 512.0f});
  const std::vector<std::byte> inner_blob = inner.StateDict();
  mlframework::detail::BlobWriter writer("amp.GradScaler", 2);
  writer.U64(inner_blob.size());
  writer.Bytes(inner_blob);
  writer.U8(0);  // Ready
  writer.U8(0);  // no found-inf
  writer.U8(1);  // enabled
  resumed.LoadStateDict(writer.Finish());
  BOOST_TEST(resumed.CurrentScale() == 512.0f);
  BOOST_TEST(resumed.StepIndex() == 1003);

  // A corrupted step index is refused (negative), the scaler unchanged.
  mlframework::detail::BlobWriter negative("amp.GradScaler", 3);
  negative.U64(inner_blob.size());
  negative.Bytes(inner_blob);
  negative.U8(0);
  negative.U8(0);
  negative.U8(1);
  negative.I64(-1);
  ExpectRefused<ArgumentError>(
      resumed, [&] { resumed.LoadStateDict(negative.Finish()); }, "step index");
  BOOST_TEST(resumed.StepIndex() == 1003);
}

// A further optimizer joining the iteration Step(o1) finished keeps that iteration's index,
// and an index set between the steps holds for the next iteration.
BOOST_AUTO_TEST_CASE(AJoiningOptimizerKeepsTheIterationsStepIndex) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 64.0f});
  RecordingOptimizer o1;
  RecordingOptimizer o2;
  scaler.SetStepIndex(7);
  scaler.Scale(Scalar(1.0f));
  o1.Load(Grads(DataType::Float32));
  o2.Load(PoisonedGrads(DataType::Float32, kInf));
  scaler.Step(o1);
  scaler.SetStepIndex(20);  // the framework's next step, set before o2 joins
  BOOST_TEST(!scaler.Step(o2));
  BOOST_TEST(scaler.LastOverflow()->Step == 7);
  BOOST_TEST(scaler.StepIndex() == 20);
}

BOOST_AUTO_TEST_SUITE_END()
