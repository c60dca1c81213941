// Two optimizers stepped by one GradScaler in each iteration, bit for bit against
// torch.amp.GradScaler("cpu"): tests/data/grad_scaler_two_optimizers.txt holds torch's run
// (tests/data/gen_grad_scaler_two_optimizers.py made it, outside CI): the scaled gradients given
// to each parameter, Inf/NaN in one optimizer's gradients only on some steps (both on one), a
// clip by value of the first optimizer's unscaled gradients on some steps, and after each step
// torch's scale, each optimizer's skip decision and every parameter. The same gradients go
// through GradScaler (PyTorch's Scale, Unscale, Step(o1), Step(o2), Update()), through the
// deferred flow and through GradScalerContext, with the library's SGD.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "NonFinite.hpp"
#include "amp/AmpTestUtil.hpp"
#include "amp/FakeDeviceBackend.hpp"

#ifndef MLFW_GRAD_SCALER_TWO_OPTIMIZERS
#error "MLFW_GRAD_SCALER_TWO_OPTIMIZERS must name tests/data/grad_scaler_two_optimizers.txt"
#endif

using namespace mlframework;
using mlframework::amp::DynamicScalerConfig;
using mlframework::amp::GradScaler;
using mlframework::amp::GradScalerContext;
using mlframework::amp::StepMode;
using mlframework::optimizers::SGD;
using mlframework::optimizers::SGDOptions;
using mlfw_test::ExpectRefused;
using mlfw_test::Grads;
using mlfw_test::HalvingScaler;
using mlfw_test::PoisonedGrads;
using mlfw_test::RecordingOptimizer;
using mlfw_test::Values;

namespace {

using Bits = std::vector<std::uint32_t>;
using mlfw_test::kInf;
using Key = std::pair<int, std::string>;  // optimizer (1 or 2), parameter name

struct TorchStep {
  int index = 0;
  bool clip = false;
  std::uint32_t scale_before = 0;
  std::map<Key, Bits> gradients;
  bool stepped[2] = {false, false};
  std::uint32_t scale_after = 0;
  std::map<Key, Bits> weights;
};

struct TorchRun {
  float init_scale = 0, growth = 0, backoff = 0, clip = 0, lr1 = 0, momentum1 = 0, lr2 = 0;
  int growth_interval = 0;
  std::map<Key, Bits> initial;
  std::vector<TorchStep> steps;
};

std::uint32_t Hex(std::istream& in) {
  std::string word;
  in >> word;
  return static_cast<std::uint32_t>(std::stoul(word, nullptr, 16));
}
float HexFloat(std::istream& in) { return std::bit_cast<float>(Hex(in)); }

std::pair<Key, Bits> ReadTensor(std::istream& in) {
  Key key;
  in >> key.first >> key.second;
  Bits bits;
  std::string word;
  while (in >> word) {
    bits.push_back(static_cast<std::uint32_t>(std::stoul(word, nullptr, 16)));
  }
  return {key, bits};
}

const TorchRun& Run() {
  static const TorchRun kRun = [] {
    TorchRun run;
    std::ifstream file(MLFW_GRAD_SCALER_TWO_OPTIMIZERS);
    BOOST_TEST_REQUIRE(file.good(), "cannot open " << MLFW_GRAD_SCALER_TWO_OPTIMIZERS);
    std::string line;
    while (std::getline(file, line)) {
      if (line.empty() || line[0] == '#') {
        continue;
      }
      std::istringstream in(line);
      std::string kind;
      in >> kind;
      if (kind == "C") {
        run.init_scale = HexFloat(in);
        run.growth = HexFloat(in);
        run.backoff = HexFloat(in);
        in >> run.growth_interval;
        run.clip = HexFloat(in);
        run.lr1 = HexFloat(in);
        run.momentum1 = HexFloat(in);
        run.lr2 = HexFloat(in);
      } else if (kind == "P") {
        run.initial.insert(ReadTensor(in));
      } else if (kind == "S") {
        TorchStep step;
        int clip = 0;
        in >> step.index >> clip;
        step.clip = clip == 1;
        step.scale_before = Hex(in);
        run.steps.push_back(step);
      } else if (kind == "G") {
        run.steps.back().gradients.insert(ReadTensor(in));
      } else if (kind == "R") {
        int index = 0, s1 = 0, s2 = 0;
        in >> index >> s1 >> s2;
        run.steps.back().stepped[0] = s1 == 1;
        run.steps.back().stepped[1] = s2 == 1;
        run.steps.back().scale_after = Hex(in);
      } else if (kind == "W") {
        run.steps.back().weights.insert(ReadTensor(in));
      }
    }
    BOOST_TEST_REQUIRE(run.steps.size() >= 10U);
    return run;
  }();
  return kRun;
}

TensorPtr FromBits(const Bits& bits) {
  std::vector<float> values(bits.size());
  std::transform(bits.begin(), bits.end(), values.begin(), [](std::uint32_t b) { return std::bit_cast<float>(b); });
  return FromVector(values, {values.size()}, DataType::Float32);
}

Bits BitsOf(const TensorPtr& tensor) {
  const std::vector<float> values = tensor->ToFloatVector();
  Bits bits(values.size());
  std::transform(values.begin(), values.end(), bits.begin(), [](float v) { return std::bit_cast<std::uint32_t>(v); });
  return bits;
}

GradientMap TensorsOf(const std::map<Key, Bits>& tensors, int optimizer) {
  GradientMap out;
  for (const auto& [key, bits] : tensors) {
    if (key.first == optimizer) {
      out.emplace(key.second, FromBits(bits));
    }
  }
  return out;
}

// torch.nn.utils.clip_grad_value_: clamps the unscaled gradients in place (NaN stays NaN).
void ClipByValue(const GradientMap& gradients, float clip) {
  for (const auto& [name, tensor] : gradients) {
    std::vector<float> values = tensor->ToFloatVector();
    for (float& v : values) {
      v = v > clip ? clip : (v < -clip ? -clip : v);
    }
    tensor->CopyFromFloats(values);
  }
}

enum class Flow { PyTorch, Deferred, Context };

// Runs torch's trajectory through @p flow and checks every recorded value.
void Replay(Flow flow) {
  const TorchRun& run = Run();
  GradScaler scaler(DynamicScalerConfig{.InitialScale = run.init_scale,
                                        .GrowthFactor = run.growth,
                                        .BackoffFactor = run.backoff,
                                        .GrowthInterval = run.growth_interval});
  SGD o1(TensorsOf(run.initial, 1), SGDOptions{.LearningRate = run.lr1, .Momentum = run.momentum1});
  SGD o2(TensorsOf(run.initial, 2), SGDOptions{.LearningRate = run.lr2});
  int overflowed_alone = 0;
  for (const TorchStep& step : run.steps) {
    BOOST_TEST_CONTEXT("step " << step.index) {
      BOOST_TEST(std::bit_cast<std::uint32_t>(scaler.CurrentScale()) == step.scale_before);
      bool stepped[2] = {false, false};
      const TensorPtr loss = Scalar(1.0f);
      if (flow == Flow::Context) {
        GradScalerContext ctx(scaler, loss);
        o1.SetGradients(TensorsOf(step.gradients, 1));  // backward
        o2.SetGradients(TensorsOf(step.gradients, 2));
        if (step.clip) {
          ClipByValue(scaler.Unscale(o1), run.clip);
        }
        stepped[0] = ctx.Step(o1);
        stepped[1] = ctx.Step(o2);
      } else {
        scaler.Scale(loss);
        o1.SetGradients(TensorsOf(step.gradients, 1));
        o2.SetGradients(TensorsOf(step.gradients, 2));
        if (step.clip) {
          // The gradients, as spec 004's clipping flow writes it, or the optimizer.
          ClipByValue(flow == Flow::PyTorch ? scaler.Unscale(o1.GetGradients()) : scaler.Unscale(o1), run.clip);
        }
        if (flow == Flow::PyTorch) {
          stepped[0] = scaler.Step(o1);
          stepped[1] = scaler.Step(o2);
        } else {
          for (int i = 0; i < 2; ++i) {
            SGD& opt = i == 0 ? o1 : o2;
            stepped[i] = scaler.Step(opt, StepMode::DeferStepAndUpdate);
            if (stepped[i]) {
              opt.Step();
            }
          }
        }
        scaler.Update();
      }
      BOOST_TEST(stepped[0] == step.stepped[0]);
      BOOST_TEST(stepped[1] == step.stepped[1]);
      overflowed_alone += stepped[0] != stepped[1] ? 1 : 0;
      BOOST_TEST(std::bit_cast<std::uint32_t>(scaler.CurrentScale()) == step.scale_after);
      for (const auto& [key, bits] : step.weights) {
        const SGD& opt = key.first == 1 ? o1 : o2;
        BOOST_TEST(BitsOf(opt.Parameters().at(key.second)) == bits, boost::test_tools::per_element());
      }
    }
  }
  // The run covers what it is for: one optimizer skipped while the other steps, growth and backoff.
  BOOST_TEST(overflowed_alone >= 4);
  BOOST_TEST(scaler.GetStats()->TotalSteps == static_cast<std::int64_t>(run.steps.size()));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(GradScalerTwoOptimizersTests)

// GrowthInterval 1: o1's clean Step grows the scale at once; o2 of the same iteration is still
// unscaled with the iteration's scale, and its overflow turns the growth into one backoff.
BOOST_AUTO_TEST_CASE(AFurtherOptimizerJoinsTheIterationAndItsUpdate) {
  for (const DataType dtype : {DataType::Float32, DataType::Float16}) {
    BOOST_TEST_CONTEXT(dtype) {
      GradScaler scaler(DynamicScalerConfig{.InitialScale = 64.0f, .GrowthInterval = 1});
      RecordingOptimizer o1;
      RecordingOptimizer o2;
      // o2 clean: unscaled by 64, not by the grown 128; one update.
      scaler.Scale(Scalar(1.0f));
      o1.Load(Grads(dtype, 64.0f));
      o2.Load(Grads(dtype, 64.0f));
      BOOST_TEST(scaler.Step(o1));
      BOOST_TEST(scaler.CurrentScale() == 128.0f);
      BOOST_TEST(scaler.Step(o2));
      BOOST_TEST(scaler.CurrentScale() == 128.0f);
      BOOST_TEST(Values(o2.stepped_with.at("a")) == (std::vector<float>{1.0f, -2.0f, 0.5f}),
                 boost::test_tools::per_element());
      BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
      const auto after = scaler.StateDict();
      scaler.Update();  // accepted, nothing more
      BOOST_TEST((scaler.StateDict() == after));
      // o2 overflows: o1 stepped, o2 skipped, the growth becomes one backoff from 128.
      scaler.Scale(Scalar(1.0f));
      o1.Load(Grads(dtype, 128.0f));
      o2.Load(PoisonedGrads(dtype, kInf, 128.0f));
      BOOST_TEST(scaler.Step(o1));
      BOOST_TEST(scaler.CurrentScale() == 256.0f);
      BOOST_TEST(!scaler.Step(o2));
      BOOST_TEST(scaler.CurrentScale() == 64.0f);
      BOOST_TEST(o1.steps == 2);
      BOOST_TEST(o2.steps == 1);
      BOOST_TEST(scaler.GetStats()->TotalSteps == 2);
      BOOST_TEST(scaler.GetStats()->TotalOverflows == 1);
      BOOST_TEST(scaler.GetStats()->StepsSinceLastOverflow == 0);
      BOOST_TEST(scaler.LastOverflow().has_value());
      // A third optimizer joins too; the same optimizer again starts the next iteration.
      RecordingOptimizer o3(Grads(dtype, 64.0f));
      BOOST_TEST(scaler.Step(o3));
      BOOST_TEST(scaler.CurrentScale() == 64.0f);
      BOOST_TEST(scaler.GetStats()->TotalSteps == 2);
      o1.Load(Grads(dtype, 64.0f));
      BOOST_TEST(scaler.Step(o1));
      BOOST_TEST(scaler.GetStats()->TotalSteps == 3);
      BOOST_TEST(scaler.CurrentScale() == 128.0f);
    }
  }
}

// Observers hear an iteration when Step(o1) finishes it, and again only when o2's overflow
// changes it (same step index, the backoff and the report).
BOOST_AUTO_TEST_CASE(ObserversHearAJoiningOptimizerOnlyWhenItChangesTheIteration) {
  struct Recorder final : ITrainingObserver {
    void OnStep(const StepEvent& event) override { events.push_back(event); }
    void OnScaleBackoff(std::int64_t /*step*/, float /*old_scale*/, float new_scale) override {
      backoffs.push_back(new_scale);
    }
    std::vector<StepEvent> events;
    std::vector<float> backoffs;
  };
  const auto recorder = std::make_shared<Recorder>();
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 64.0f, .GrowthInterval = 1});
  scaler.AddObserver(recorder);
  RecordingOptimizer o1(Grads(DataType::Float32, 64.0f));
  RecordingOptimizer o2(Grads(DataType::Float32, 64.0f));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(scaler.Step(o1));
  BOOST_TEST(scaler.Step(o2));  // clean: nothing more to tell
  BOOST_TEST_REQUIRE(recorder->events.size() == 1U);
  BOOST_TEST(recorder->events[0].NewLossScale == 128.0f);
  scaler.Scale(Scalar(1.0f));
  o1.Load(Grads(DataType::Float32, 128.0f));
  o2.Load(PoisonedGrads(DataType::Float32, kInf, 128.0f));
  BOOST_TEST(scaler.Step(o1));
  BOOST_TEST(!scaler.Step(o2));
  BOOST_TEST_REQUIRE(recorder->events.size() == 3U);
  BOOST_TEST(recorder->events[1].Step == 1);
  BOOST_TEST(!recorder->events[1].Skipped);
  BOOST_TEST(recorder->events[1].NewLossScale == 256.0f);
  BOOST_TEST(recorder->events[2].Step == 1);  // the same iteration, told again
  BOOST_TEST(recorder->events[2].Skipped);
  BOOST_TEST(recorder->events[2].LossScale == 128.0f);
  BOOST_TEST(recorder->events[2].NewLossScale == 64.0f);
  BOOST_TEST(recorder->events[2].Overflow != nullptr);
  BOOST_TEST(recorder->backoffs == std::vector<float>{64.0f}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(EachOptimizerUnscaledForClippingThenStepped) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 16.0f, .GrowthInterval = 1});
  RecordingOptimizer o1(Grads(DataType::Float16, 16.0f));
  RecordingOptimizer o2(PoisonedGrads(DataType::Float32, kInf, 16.0f));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(Values(scaler.Unscale(o1).at("b")) == (std::vector<float>{4.0f, -0.25f}),
             boost::test_tools::per_element());
  const GradientMap unscaled2 = scaler.Unscale(o2);
  BOOST_TEST(Values(unscaled2.at("b")) == (std::vector<float>{4.0f, -0.25f}), boost::test_tools::per_element());
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Unscale(o2); }, "already called");
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Unscale(o1.GetGradients()); }, "already called");
  BOOST_TEST(scaler.CheckOverflow(unscaled2));  // o2's own result
  BOOST_TEST(scaler.Step(o1));                  // o1 clean: stepped
  BOOST_TEST(scaler.CurrentScale() == 8.0f);    // the OR: one backoff
  BOOST_TEST(!scaler.Step(o2));                 // o2 skipped, no second update
  BOOST_TEST(scaler.CurrentScale() == 8.0f);
  scaler.Update();
  BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
  BOOST_TEST(Values(o1.stepped_with.at("a")) == (std::vector<float>{1.0f, -2.0f, 0.5f}),
             boost::test_tools::per_element());
  BOOST_TEST(o2.steps == 0);
  BOOST_TEST(Values(o2.GetGradients().at("b"))[0] == 4.0f);  // unscaled once
}

BOOST_AUTO_TEST_CASE(DeferredStepsOfSeveralOptimizersUpdateOnce) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 16.0f, .GrowthInterval = 1});
  RecordingOptimizer o1(PoisonedGrads(DataType::Float16, kInf, 16.0f));
  RecordingOptimizer o2(Grads(DataType::BFloat16, 16.0f));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(!scaler.Step(o1, StepMode::DeferStepAndUpdate));
  BOOST_TEST(scaler.Step(o2, StepMode::DeferStepAndUpdate));
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Step(o1, StepMode::DeferStepAndUpdate); }, "already called");
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Step(o2); }, "already called");
  BOOST_TEST(scaler.CurrentScale() == 16.0f);  // not updated before Update()
  scaler.Update();
  BOOST_TEST(scaler.CurrentScale() == 8.0f);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
  BOOST_TEST(o2.set_calls == 1);  // o2 got its FP32 unscaled gradients; its step is the caller's
  BOOST_TEST(Values(o2.GetGradients().at("a")) == (std::vector<float>{1.0f, -2.0f, 0.5f}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(SequencesThatCannotBeRightAreRefused) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 16.0f});
  RecordingOptimizer o1(Grads(DataType::Float32, 16.0f));
  RecordingOptimizer o2(Grads(DataType::Float32, 16.0f));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(scaler.Step(o1));
  // After Step(o1) finished the iteration: unscaling o2 (for clipping) would use the next scale.
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Unscale(o2); }, "before the first Step()");
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Unscale(o2.GetGradients()); }, "Scale(loss)");
  BOOST_TEST(Values(o2.GetGradients().at("a"))[0] == 16.0f);  // untouched
  BOOST_TEST(scaler.Step(o2));
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Step(o2); }, "twice");
  // The manual flow's Unscale(gradients) of gradients no optimizer stepped: another optimizer's Step is refused.
  scaler.Scale(Scalar(1.0f));
  o1.Load(Grads(DataType::Float32, 16.0f));
  o2.Load(Grads(DataType::Float32, 16.0f));
  scaler.Unscale(o1.GetGradients());
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Step(o2); }, "Unscale(optimizer) for each");
  BOOST_TEST(scaler.Step(o1));
}

// Enable() or Disable() between Step(o1) and Step(o2): a switch that changes would have o2's
// gradients unscaled though never scaled (Enable) or stepped still scaled (Disable), so o2 is
// refused until the next Scale(loss); a switch that stays as it is lets o2 join as usual.
BOOST_AUTO_TEST_CASE(ASwitchBetweenTwoOptimizersStepsRefusesTheSecondOnlyWhenItChanges) {
  const std::vector<float> unscaled = {1.0f, -2.0f, 0.5f};
  for (const bool start_enabled : {true, false}) {
    for (const bool flip : {true, false}) {
      BOOST_TEST_CONTEXT("enabled " << start_enabled << ", flip " << flip) {
        GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
        if (!start_enabled) {
          scaler.Disable();
        }
        const float factor = start_enabled ? 8.0f : 1.0f;
        RecordingOptimizer o1(Grads(DataType::Float16, factor));
        RecordingOptimizer o2(Grads(DataType::Float16, factor));
        scaler.Scale(Scalar(1.0f));
        BOOST_TEST(scaler.Step(o1));
        const bool enable = start_enabled != flip;
        if (enable) {
          scaler.Enable();
        } else {
          scaler.Disable();
        }
        const float scale = scaler.CurrentScale();
        if (flip) {
          const std::string call = enable ? "Enable()" : "Disable()";
          ExpectRefused<InvalidOperationError>(
              scaler, [&] { scaler.Step(o2); }, call);
          ExpectRefused<InvalidOperationError>(
              scaler, [&] { scaler.Unscale(o2); }, call);
          BOOST_TEST(o2.steps == 0);
          scaler.Update();  // accepted, nothing changes
        } else {
          BOOST_TEST(scaler.Step(o2));  // joins the iteration
          BOOST_TEST(Values(o2.stepped_with.at("a")) == unscaled, boost::test_tools::per_element());
        }
        BOOST_TEST(scaler.CurrentScale() == scale);
        BOOST_TEST(scaler.GetStats()->TotalSteps == (start_enabled ? 1 : 0));
        // The next iteration steps both as usual.
        scaler.Scale(Scalar(1.0f));
        const float next = scaler.IsEnabled() ? scaler.CurrentScale() : 1.0f;
        o1.Load(Grads(DataType::Float16, next));
        o2.Load(Grads(DataType::Float16, next));
        BOOST_TEST(scaler.Step(o1));
        BOOST_TEST(scaler.Step(o2));
        BOOST_TEST(Values(o2.stepped_with.at("a")) == unscaled, boost::test_tools::per_element());
      }
    }
  }
}

// Reset() between Step(o1) and Step(o2), with Step(o1) finishing the iteration or deferring its
// update: o2's gradients were scaled with the iteration's scale, which the reset replaced with
// the initial one, so o2 is refused until the next Scale(loss), as after LoadStateDict(), not
// unscaled with the initial scale; o1's gradients, already stepped, stay refused too. Update() is
// accepted and changes nothing.
BOOST_AUTO_TEST_CASE(AResetBetweenTwoOptimizersStepsRefusesTheSecond) {
  const std::vector<float> unscaled = {1.0f, -2.0f, 0.5f};
  for (const DataType dtype : {DataType::Float32, DataType::Float16}) {
    for (const StepMode mode : {StepMode::StepAndUpdate, StepMode::DeferUpdate}) {
      BOOST_TEST_CONTEXT(dtype << ", mode " << static_cast<int>(mode)) {
        GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
        RecordingOptimizer o1(Grads(dtype, 8.0f));
        RecordingOptimizer o2(Grads(dtype, 8.0f));
        scaler.Scale(Scalar(1.0f));
        BOOST_TEST(scaler.Step(o1));
        BOOST_TEST(scaler.Step(o2));
        BOOST_TEST(scaler.CurrentScale() == 16.0f);  // an iteration scale other than the initial one
        scaler.Scale(Scalar(1.0f));
        o1.Load(Grads(dtype, 16.0f));
        o2.Load(Grads(dtype, 16.0f));
        BOOST_TEST(scaler.Step(o1, mode));
        scaler.Reset();
        BOOST_TEST(scaler.CurrentScale() == 8.0f);
        ExpectRefused<InvalidOperationError>(
            scaler, [&] { scaler.Step(o2, mode); }, "Reset()");
        ExpectRefused<InvalidOperationError>(
            scaler, [&] { scaler.Unscale(o2); }, "Reset()");
        ExpectRefused<InvalidOperationError>(
            scaler, [&] { scaler.Step(o1, mode); }, "Scale(loss)");
        BOOST_TEST(o1.steps == 2);
        BOOST_TEST(o2.steps == 1);
        BOOST_TEST(Values(o2.GetGradients().at("a")) == (std::vector<float>{16.0f, -32.0f, 8.0f}),
                   boost::test_tools::per_element());
        scaler.Update();  // accepted, nothing changes
        BOOST_TEST(scaler.CurrentScale() == 8.0f);
        BOOST_TEST(scaler.GetStats()->TotalSteps == 0);
        // The next iteration steps both as usual.
        scaler.Scale(Scalar(1.0f));
        o1.Load(Grads(dtype, 8.0f));
        o2.Load(Grads(dtype, 8.0f));
        BOOST_TEST(scaler.Step(o1));
        BOOST_TEST(scaler.Step(o2));
        BOOST_TEST(Values(o2.stepped_with.at("a")) == unscaled, boost::test_tools::per_element());
        BOOST_TEST(scaler.CurrentScale() == 16.0f);
        BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
      }
    }
  }
}

// A blob saved between iterations, loaded after a deferring Step(o1): o2's gradients were scaled
// with the iteration's scale, which the load replaced, so o2 is refused until the next
// Scale(loss), as when the load comes after a Step(o1) that finished the iteration; Update() is
// accepted and changes nothing.
BOOST_AUTO_TEST_CASE(AStateLoadedAfterADeferredStepRefusesTheSecondOptimizer) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
  const GradScaler other(DynamicScalerConfig{.InitialScale = 4.0f, .GrowthInterval = 1});
  RecordingOptimizer o1(Grads(DataType::Float16, 8.0f));
  RecordingOptimizer o2(Grads(DataType::Float16, 8.0f));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(scaler.Step(o1, StepMode::DeferUpdate));
  scaler.LoadStateDict(other.StateDict());
  BOOST_TEST(scaler.CurrentScale() == 4.0f);
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Step(o2, StepMode::DeferUpdate); }, "LoadStateDict()");
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Unscale(o2); }, "LoadStateDict()");
  BOOST_TEST(o2.steps == 0);
  scaler.Update();  // accepted, nothing changes
  BOOST_TEST(scaler.CurrentScale() == 4.0f);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 0);
  scaler.Scale(Scalar(1.0f));
  o1.Load(Grads(DataType::Float16, 4.0f));
  o2.Load(Grads(DataType::Float16, 4.0f));
  BOOST_TEST(scaler.Step(o1));
  BOOST_TEST(scaler.Step(o2));
  BOOST_TEST(Values(o2.stepped_with.at("a")) == (std::vector<float>{1.0f, -2.0f, 0.5f}),
             boost::test_tools::per_element());
  BOOST_TEST(scaler.CurrentScale() == 8.0f);
}

// CheckOverflow(gradients) after Step(o1) finished the iteration is refused, as Unscale(gradients)
// is there: recorded, it would open an iteration that Update() applies a second time. o2 still
// joins the iteration with Step(o2), whose check is the one that counts.
BOOST_AUTO_TEST_CASE(ACheckAfterAFinishingStepIsRefused) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
  RecordingOptimizer o1(Grads(DataType::Float32, 8.0f));
  RecordingOptimizer o2(PoisonedGrads(DataType::Float32, kInf, 8.0f));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(scaler.Step(o1));
  BOOST_TEST(scaler.CurrentScale() == 16.0f);
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { (void)scaler.CheckOverflow(o2.GetGradients()); }, "Scale(loss)");
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { (void)scaler.CheckOverflow(o1.GetGradients()); }, "Scale(loss)");
  BOOST_TEST(scaler.CurrentScale() == 16.0f);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
  BOOST_TEST(!scaler.Step(o2));  // joins: the OR of both, one backoff from 8
  scaler.Update();               // accepted, nothing changes
  BOOST_TEST(scaler.CurrentScale() == 4.0f);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
  BOOST_TEST(scaler.GetStats()->TotalOverflows == 1);
  // A deferring step leaves the iteration open: a check joins it.
  scaler.Scale(Scalar(1.0f));
  o1.Load(Grads(DataType::Float32, 4.0f));
  BOOST_TEST(scaler.Step(o1, StepMode::DeferUpdate));
  BOOST_TEST(scaler.CheckOverflow(PoisonedGrads(DataType::Float32, kInf, 4.0f)));
  scaler.Update();
  BOOST_TEST(scaler.CurrentScale() == 2.0f);
  BOOST_TEST(scaler.GetStats()->TotalSteps == 2);
}

// Update() between Step(o1) and Step(o2) ends the iteration (PyTorch's update() comes after the
// last step): o2's gradients, scaled with the iteration's scale, would be unscaled with the
// updated one and update the scale a second time, so Step(o2) and Unscale(o2) are refused until
// the next Scale(loss).
BOOST_AUTO_TEST_CASE(AnUpdateBetweenTwoOptimizersStepsRefusesTheSecond) {
  const std::vector<float> unscaled = {1.0f, -2.0f, 0.5f};
  for (const StepMode mode : {StepMode::StepAndUpdate, StepMode::DeferUpdate}) {
    BOOST_TEST_CONTEXT("mode " << static_cast<int>(mode)) {
      GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
      RecordingOptimizer o1(Grads(DataType::Float16, 8.0f));
      RecordingOptimizer o2(Grads(DataType::Float16, 8.0f));
      scaler.Scale(Scalar(1.0f));
      BOOST_TEST(scaler.Step(o1, mode));
      scaler.Update();
      BOOST_TEST(scaler.CurrentScale() == 16.0f);
      ExpectRefused<InvalidOperationError>(
          scaler, [&] { scaler.Step(o2, mode); }, "Update()");
      ExpectRefused<InvalidOperationError>(
          scaler, [&] { scaler.Unscale(o2); }, "Update()");
      ExpectRefused<InvalidOperationError>(
          scaler, [&] { scaler.Update(); }, "no overflow check");  // nothing left to finish
      BOOST_TEST(o2.steps == 0);
      BOOST_TEST(scaler.CurrentScale() == 16.0f);
      BOOST_TEST(scaler.GetStats()->TotalSteps == 1);
      // The next iteration steps both as usual.
      scaler.Scale(Scalar(1.0f));
      o1.Load(Grads(DataType::Float16, 16.0f));
      o2.Load(Grads(DataType::Float16, 16.0f));
      BOOST_TEST(scaler.Step(o1, mode));
      BOOST_TEST(scaler.Step(o2, mode));
      scaler.Update();
      BOOST_TEST(Values(o2.stepped_with.at("a")) == unscaled, boost::test_tools::per_element());
      BOOST_TEST(scaler.CurrentScale() == 32.0f);
      BOOST_TEST(scaler.GetStats()->TotalSteps == 2);
    }
  }
}

// After Reset() between a deferring Step(o1) and Step(o2), Unscale(o2's gradients) and
// CheckOverflow(o2's gradients) are refused as Step(o2) is, naming the call that closed the
// iteration (o1's step did not update the scale).
BOOST_AUTO_TEST_CASE(ARefusalAfterAClosedIterationNamesTheCallThatClosedIt) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
  RecordingOptimizer o1(Grads(DataType::Float32, 8.0f));
  RecordingOptimizer o2(Grads(DataType::Float32, 8.0f));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(scaler.Step(o1, StepMode::DeferUpdate));
  scaler.Reset();
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { (void)scaler.CheckOverflow(o2.GetGradients()); }, "Reset()");
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { (void)scaler.Unscale(o2.GetGradients()); }, "Reset()");
  BOOST_TEST(Values(o2.GetGradients().at("a")) == (std::vector<float>{8.0f, -16.0f, 4.0f}),
             boost::test_tools::per_element());
}

// LastAmax() of an iteration two optimizers stepped in covers both; when amax tracking was
// turned on between Step(o1) and Step(o2), o1's gradients were not tracked, so the iteration has
// none (not o2's alone, passed off as the iteration's).
BOOST_AUTO_TEST_CASE(AmaxTrackingTurnedOnBetweenTwoOptimizersStepsReportsNone) {
  for (const bool on_from_start : {true, false}) {
    BOOST_TEST_CONTEXT("on from the start " << on_from_start) {
      GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
      RecordingOptimizer o1(Grads(DataType::Float32, 16.0f));  // amax 8 once unscaled
      RecordingOptimizer o2(Grads(DataType::Float32, 8.0f));   // amax 4
      scaler.SetAmaxTracking(on_from_start);
      scaler.Scale(Scalar(1.0f));
      BOOST_TEST(scaler.Step(o1));
      scaler.SetAmaxTracking(true);
      BOOST_TEST(scaler.Step(o2));
      BOOST_TEST(scaler.LastAmax().value_or(-1.0f) == (on_from_start ? 8.0f : -1.0f));
      // The next iteration is tracked whole.
      scaler.Scale(Scalar(1.0f));
      o1.Load(Grads(DataType::Float32, 32.0f));
      o2.Load(Grads(DataType::Float32, 16.0f));
      BOOST_TEST(scaler.Step(o1));
      BOOST_TEST(scaler.Step(o2));
      BOOST_TEST(scaler.LastAmax().value_or(-1.0f) == 8.0f);
    }
  }
}

BOOST_AUTO_TEST_CASE(AScalerThatCannotRestoreItsStateRefusesAJoiningOptimizer) {
  GradScaler scaler(std::make_shared<HalvingScaler>());
  RecordingOptimizer o1(PoisonedGrads(DataType::Float32, kInf));
  RecordingOptimizer o2(Grads(DataType::Float32, 256.0f));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(!scaler.Step(o1));  // the scale halves: the default checkpoint cannot go back
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Step(o2); }, "Step(optimizer, StepMode::DeferStepAndUpdate)");
  BOOST_TEST(o2.steps == 0);
  BOOST_TEST(Values(o2.GetGradients().at("a"))[0] == 256.0f);  // not unscaled
  ExpectRefused<InvalidOperationError>(
      scaler, [&] { scaler.Step(o1); }, "twice");  // the iteration is kept
  // The flow it names works: each optimizer deferred, one Update().
  scaler.Scale(Scalar(1.0f));
  o1.Load(PoisonedGrads(DataType::Float32, kInf));
  BOOST_TEST(!scaler.Step(o1, StepMode::DeferStepAndUpdate));
  BOOST_TEST(scaler.Step(o2, StepMode::DeferStepAndUpdate));
  BOOST_TEST(Values(o2.GetGradients().at("a"))[0] == 2.0f);  // by the iteration's 128
  scaler.Update();
  BOOST_TEST(scaler.CurrentScale() == 64.0f);
}

// The device path (FakeDeviceBackend): the same results as on the host; a step reads only its
// found-inf (the snapshot kept for a further optimizer is the host copy of the state), a joining
// optimizer reads its found-inf and writes the snapshot back.
BOOST_AUTO_TEST_CASE(SeveralOptimizersOnADeviceMatchTheHost) {
  const DynamicScalerConfig config{.InitialScale = 1024.0f, .GrowthInterval = 2};
  GradScaler host(config);
  GradScaler device(config);
  const auto grads = [](int step, bool poison, bool on_device) {
    std::vector<float> a = {0.5f * static_cast<float>(step + 1), -3.0f, 1000.0f};
    if (poison) {
      a[1] = kInf;
    }
    return on_device ? GradientMap{{"a", mlfw_test::FakeTensor(a, {3}, DataType::Float16)}}
                     : GradientMap{{"a", FromVector(a, {3}, DataType::Float16)}};
  };
  RecordingOptimizer h1, h2, d1, d2;
  const std::vector<int> poison = {0, 2, 0, 1, 0, 0, 3, 0, 0, 2};  // 1: o1, 2: o2, 3: both
  for (int step = 0; step < static_cast<int>(poison.size()); ++step) {
    BOOST_TEST_CONTEXT("step " << step) {
      h1.Load(grads(step, (poison[step] & 1) != 0, false));
      h2.Load(grads(step, (poison[step] & 2) != 0, false));
      d1.Load(grads(step, (poison[step] & 1) != 0, true));
      d2.Load(grads(step, (poison[step] & 2) != 0, true));
      host.Scale(Scalar(1.0f));
      const bool h_stepped1 = host.Step(h1);
      const bool h_stepped2 = host.Step(h2);
      host.Update();
      device.Scale(mlfw_test::FakeTensor({1.0f}, {}, DataType::Float32));
      bool d_stepped1 = false;
      const std::int64_t first = mlfw_test::SyncsDuring([&] { d_stepped1 = device.Step(d1); });
      bool d_stepped2 = false;
      const std::int64_t second = mlfw_test::SyncsDuring([&] { d_stepped2 = device.Step(d2); });
      device.Update();
      if (step > 0) {             // the first step also creates the device state
        BOOST_TEST(first == 1);   // the found-inf
        BOOST_TEST(second == 2);  // its found-inf, and the snapshot written back before its update
      }
      BOOST_TEST(h_stepped1 == ((poison[step] & 1) == 0));
      BOOST_TEST(h_stepped2 == ((poison[step] & 2) == 0));
      BOOST_TEST(d_stepped1 == h_stepped1);
      BOOST_TEST(d_stepped2 == h_stepped2);
      BOOST_TEST(device.CurrentScale() == host.CurrentScale());
      BOOST_TEST(device.GetStats()->TotalOverflows == host.GetStats()->TotalOverflows);
      BOOST_TEST(device.GetStats()->TotalSteps == step + 1);
      if (h_stepped2) {
        BOOST_TEST(Values(d2.stepped_with.at("a")) == Values(h2.stepped_with.at("a")),
                   boost::test_tools::per_element());
      }
    }
  }
}

// One optimizer on a device, nothing read between the steps: keeping the scale snapshot for a
// further optimizer costs no device read, so each Step(opt) reads only its found-inf.
BOOST_AUTO_TEST_CASE(StepKeepsItsScaleSnapshotWithoutADeviceRead) {
  const DynamicScalerConfig config{.InitialScale = 1024.0f, .GrowthInterval = 3};
  GradScaler host(config);
  GradScaler device(config);
  RecordingOptimizer h;
  RecordingOptimizer d;
  const std::vector<bool> poison = {false, false, true, false, false, false, true, true, false, false};
  std::vector<std::int64_t> syncs;
  for (int step = 0; step < static_cast<int>(poison.size()); ++step) {
    std::vector<float> a = {0.25f * static_cast<float>(step + 1), 2.0f};
    if (poison[step]) {
      a[0] = kInf;
    }
    h.Load(GradientMap{{"a", FromVector(a, {2}, DataType::Float16)}});
    d.Load(GradientMap{{"a", mlfw_test::FakeTensor(a, {2}, DataType::Float16)}});
    host.Scale(Scalar(1.0f));
    BOOST_TEST(host.Step(h) == !poison[step]);
    syncs.push_back(mlfw_test::SyncsDuring([&] {
      device.Scale(mlfw_test::FakeTensor({1.0f}, {}, DataType::Float32));
      BOOST_TEST(device.Step(d) == !poison[step]);
    }));
  }
  // The first step also creates the device state.
  const std::vector<std::int64_t> expected = {2, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  BOOST_TEST(syncs == expected, boost::test_tools::per_element());
  BOOST_TEST(device.CurrentScale() == host.CurrentScale());
  BOOST_TEST(device.GetStats()->TotalOverflows == host.GetStats()->TotalOverflows);
  BOOST_TEST(device.GetStats()->StepsSinceLastOverflow == host.GetStats()->StepsSinceLastOverflow);
}

// Two optimizers over modules whose parameters have the same local names and shapes, with
// FP16/BF16 gradients: each gets FP32 tensors of its own. The scaler keeps one FP32 buffer per
// name for the next iteration, so a second optimizer's unscale must not write into the tensors
// the first one was handed (or the clipping flow's Unscale(o1) returned) in the same iteration.
BOOST_AUTO_TEST_CASE(OptimizersWithTheSameGradientNamesKeepTheirOwnUnscaledGradients) {
  const std::vector<float> own1 = {1.0f, -2.0f, 0.5f};
  const std::vector<float> own2 = {3.0f, -6.0f, 1.5f};  // Grads(dtype, 3 * 16) unscaled by 16
  for (const DataType dtype2 : {DataType::Float16, DataType::BFloat16}) {
    for (const int flow : {0, 1, 2}) {  // 0: Unscale(o1), Unscale(o2), Step, Step; 1: deferred steps; 2: Step, Step
      BOOST_TEST_CONTEXT("o2 " << dtype2 << ", flow " << flow) {
        GradScaler scaler(DynamicScalerConfig{.InitialScale = 16.0f});
        RecordingOptimizer o1(Grads(DataType::Float16, 16.0f));
        RecordingOptimizer o2(Grads(dtype2, 48.0f));
        scaler.Scale(Scalar(1.0f));
        GradientMap clipped1;
        if (flow == 0) {
          clipped1 = scaler.Unscale(o1);
          scaler.Unscale(o2);
          BOOST_TEST(Values(clipped1.at("a")) == own1, boost::test_tools::per_element());
        }
        if (flow == 1) {
          BOOST_TEST(scaler.Step(o1, StepMode::DeferStepAndUpdate));
          BOOST_TEST(scaler.Step(o2, StepMode::DeferStepAndUpdate));
          o1.Step();
          o2.Step();
          scaler.Update();
        } else {
          BOOST_TEST(scaler.Step(o1));
          BOOST_TEST(scaler.Step(o2));
        }
        BOOST_TEST(Values(o1.stepped_with.at("a")) == own1, boost::test_tools::per_element());
        BOOST_TEST(Values(o2.stepped_with.at("a")) == own2, boost::test_tools::per_element());
        BOOST_TEST(Values(o1.GetGradients().at("a")) == own1, boost::test_tools::per_element());
        // The next iteration, one optimizer: the scaler's buffer is written again, not a new one.
        const ITensor* kept = o1.GetGradients().at("a").get();
        scaler.Scale(Scalar(1.0f));
        o1.Load(Grads(DataType::Float16, 32.0f));
        BOOST_TEST(scaler.Step(o1));
        BOOST_TEST(Values(o1.stepped_with.at("a")) == (std::vector<float>{2.0f, -4.0f, 1.0f}),
                   boost::test_tools::per_element());
        BOOST_TEST(o1.stepped_with.at("a").get() == kept);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(PyTorchSequenceMatchesTorchBitForBit) { Replay(Flow::PyTorch); }

BOOST_AUTO_TEST_CASE(DeferredStepsMatchTorchBitForBit) { Replay(Flow::Deferred); }

BOOST_AUTO_TEST_CASE(ContextWithTwoOptimizersMatchesTorchBitForBit) { Replay(Flow::Context); }

BOOST_AUTO_TEST_SUITE_END()
