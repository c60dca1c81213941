// The overflow invariant of issue 29, over every front end at once:
//
// - while overflow checking is on, no Inf/NaN gradient is handed to an optimizer or returned
//   with ShouldSkip == false (every step with a non-finite input is skipped);
// - after the auto-fallback to FP32 the checks go on: non-finite steps are still skipped;
// - the fallback fires exactly when the overflows in a row at the minimum scale reach
//   MaxConsecutiveOverflows (never during the back-off above the minimum), once, and shows in
//   the result of the step it happens on.
//
// Random cases: scaling policies at the edges (PropertySupport.hpp), initial scales up to the
// policy's maximum, fallback thresholds 1 to 12, gradients in FP32, FP16 and BF16, and step
// sequences of bursts, isolated overflows and clean runs with NaN, +Inf and -Inf. Every
// front end gets its own copy of the same gradients each step. A failure names the seed, the
// case, the front end and the step (MLFW_PROPERTY_SEED replays it).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/amp/GradScaler.hpp>
#include <mlframework/amp/GradScalerContext.hpp>
#include <mlframework/amp/IOptimizer.hpp>
#include <mlframework/amp/StaticLossScaler.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPAmpIntegration.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>
#include <mlframework/optimizers/mixed_precision/PrecisionManager.hpp>

#include "reliability/PropertySupport.hpp"

using namespace mlframework;
using mlframework::testing::Describe;
using mlframework::testing::DrawInt;
namespace mp = mlframework::optimizers::mixed_precision;
namespace fsdp = mlframework::distributed::fsdp;

namespace {

// Under AddressSanitizer (the sanitizer pass of scripts/test.sh unwinds the stack slowly on every
// allocation, and every step allocates its tensors) a tenth of the cases run: the same first
// draws, about 15 s there instead of minutes; a Release build runs them all in about 1.5 s.
constexpr int kCases = mlframework::testing::kUnderAddressSanitizer ? 40 : 400;
constexpr std::size_t kInvariantSteps = 80;
// Clean gradient values stay within +-kMaxValue and scales at or above kMinScale, so unscaling
// a clean gradient stays finite in FP32 (the fused front ends would skip such a step anyway).
constexpr float kMaxValue = 4.0f;
const float kMinScale = std::ldexp(1.0f, -20);

enum class Poison { None, NaN, PlusInf, MinusInf };

// One step's gradients as plain values: every front end builds its own tensors from them.
struct StepGradients {
  std::vector<std::vector<float>> values;
  Poison poison = Poison::None;
};

struct Case {
  amp::ScalePolicy policy;      // Hysteresis 1 (the mixed-precision and FSDP front ends have no other)
  std::int64_t amp_hysteresis;  // for the amp front ends, which have one
  DataType dtype;               // of the gradients
  DataType precision;           // MixedPrecisionOptions::Precision (16-bit: checking on)
  int threshold;                // MaxConsecutiveOverflows
  bool clipping;                // GradientConversionLayer clips by the global norm
  bool fsdp_scaling;            // FSDPMixedPrecisionConfig::UseLossScaling
  float static_scale;           // StaticLossScaler / GradScaler::Static
  std::vector<StepGradients> steps;
};

std::string Name(Poison poison) {
  switch (poison) {
    case Poison::None:
      return "clean";
    case Poison::NaN:
      return "NaN";
    case Poison::PlusInf:
      return "+Inf";
    case Poison::MinusInf:
      return "-Inf";
  }
  return "?";
}

float PoisonValue(Poison poison) {
  switch (poison) {
    case Poison::NaN:
      return std::numeric_limits<float>::quiet_NaN();
    case Poison::PlusInf:
      return std::numeric_limits<float>::infinity();
    case Poison::MinusInf:
      return -std::numeric_limits<float>::infinity();
    case Poison::None:
      break;
  }
  return 0.0f;
}

// Bursts of overflows (up to 40 in a row: the back-off from a high scale and beyond), isolated
// overflows between clean steps, and clean runs, each overflow NaN, +Inf or -Inf.
std::vector<Poison> DrawSequence(std::mt19937_64& rng, std::size_t length) {
  std::vector<Poison> sequence;
  const auto poison = [&] { return static_cast<Poison>(DrawInt(rng, 1, 3)); };
  while (sequence.size() < length) {
    switch (DrawInt(rng, 0, 3)) {
      case 0: {  // burst
        const std::int64_t burst = DrawInt(rng, 2, 40);
        for (std::int64_t i = 0; i < burst; ++i) {
          sequence.push_back(poison());
        }
        break;
      }
      case 1:  // isolated
        sequence.push_back(Poison::None);
        sequence.push_back(poison());
        sequence.push_back(Poison::None);
        break;
      default: {  // clean run
        const std::int64_t run = DrawInt(rng, 1, 12);
        sequence.insert(sequence.end(), static_cast<std::size_t>(run), Poison::None);
      }
    }
  }
  sequence.resize(length);
  return sequence;
}

StepGradients DrawGradients(std::mt19937_64& rng, Poison poison) {
  StepGradients step;
  step.poison = poison;
  for (const std::int64_t size : {3, 1, 5}) {
    std::vector<float> tensor(static_cast<std::size_t>(size));
    for (float& value : tensor) {
      value = mlframework::testing::DrawFloat(rng, -kMaxValue, kMaxValue);
    }
    step.values.push_back(std::move(tensor));
  }
  if (poison != Poison::None) {
    auto& tensor = step.values[static_cast<std::size_t>(DrawInt(rng, 0, 2))];
    tensor[static_cast<std::size_t>(DrawInt(rng, 0, static_cast<std::int64_t>(tensor.size()) - 1))] =
        PoisonValue(poison);
  }
  return step;
}

Case DrawCase(std::mt19937_64& rng) {
  Case c;
  amp::ScalePolicy policy = mlframework::testing::DrawPolicy(rng);
  policy.MinScale = std::max(policy.MinScale, kMinScale);
  policy.MaxScale = std::max(policy.MaxScale, policy.MinScale);
  policy.InitialScale = std::clamp(policy.InitialScale, policy.MinScale, policy.MaxScale);
  if (DrawInt(rng, 0, 3) == 0) {
    policy.InitialScale = policy.MaxScale;  // the highest start the policy allows
  }
  policy.GrowthInterval = std::min<std::int64_t>(policy.GrowthInterval, 50);
  c.amp_hysteresis = std::min<std::int64_t>(policy.Hysteresis, 5);
  policy.Hysteresis = 1;
  c.policy = policy;
  const DataType dtypes[] = {DataType::Float32, DataType::Float16, DataType::BFloat16};
  c.dtype = dtypes[DrawInt(rng, 0, 2)];
  c.precision = DrawInt(rng, 0, 1) == 0 ? DataType::Float16 : DataType::BFloat16;
  c.threshold = static_cast<int>(DrawInt(rng, 1, 12));
  c.clipping = DrawInt(rng, 0, 1) == 1;
  c.fsdp_scaling = DrawInt(rng, 0, 3) != 0;
  c.static_scale = std::ldexp(1.0f, static_cast<int>(DrawInt(rng, -20, 40)));
  for (const Poison poison : DrawSequence(rng, kInvariantSteps)) {
    c.steps.push_back(DrawGradients(rng, poison));
  }
  return c;
}

std::string DescribeCase(const Case& c, int index, std::uint64_t seed) {
  std::ostringstream text;
  text << "case " << index << " (seed " << seed << "): policy " << Describe(c.policy) << ", amp hysteresis "
       << c.amp_hysteresis << ", gradients " << ToString(c.dtype) << ", precision " << ToString(c.precision)
       << ", threshold " << c.threshold << ", clipping " << c.clipping << ", FSDP scaling " << c.fsdp_scaling
       << ", static scale " << c.static_scale;
  return text.str();
}

GradientMap Tensors(const StepGradients& step, DataType dtype) {
  GradientMap map;
  for (std::size_t i = 0; i < step.values.size(); ++i) {
    std::string name = "g";
    name += std::to_string(i);
    map.emplace(std::move(name), FromVector(step.values[i], {step.values[i].size()}, dtype));
  }
  return map;
}

bool AllFinite(const GradientMap& gradients) {
  return std::ranges::all_of(gradients, [](const auto& entry) {
    const std::vector<float> values = entry.second->ToFloatVector();
    return std::ranges::all_of(values, [](float v) { return std::isfinite(v); });
  });
}

// An optimizer that checks what it is stepped with: every gradient it holds at Step() must be finite.
class CheckingOptimizer final : public amp::IOptimizer {
 public:
  GradientMap GetGradients() override { return gradients_; }
  void SetGradients(const GradientMap& gradients) override { gradients_ = gradients; }
  void Step() override {
    ++steps;
    if (!AllFinite(gradients_)) {
      ++non_finite_steps;
    }
  }
  void Load(GradientMap gradients) { gradients_ = std::move(gradients); }
  int steps = 0;
  int non_finite_steps = 0;

 private:
  GradientMap gradients_;
};

// The fallback as the issue defines it, from the skip decisions of the front end: counts the
// overflows in a row that happen with the scale already at the minimum.
class FallbackModel {
 public:
  FallbackModel(const amp::ScalePolicy& policy, int threshold)
      : policy_(policy), threshold_(threshold), state_(amp::ScaleState::Initial(policy)) {}
  // Advances by one step; returns true on the step the fallback must happen.
  bool Step(bool overflow) {
    if (fallen_back_) {
      return false;
    }
    const bool at_min = state_.Scale <= policy_.MinScale;
    amp::UpdateScaleState(state_, policy_, overflow);
    at_min_run_ = overflow && at_min ? at_min_run_ + 1 : 0;
    fallen_back_ = at_min_run_ >= threshold_;
    return fallen_back_;
  }
  bool FellBack() const { return fallen_back_; }
  float CurrentScale() const { return fallen_back_ ? 1.0f : state_.Scale; }

 private:
  amp::ScalePolicy policy_;
  int threshold_;
  amp::ScaleState state_;
  std::int64_t at_min_run_ = 0;
  bool fallen_back_ = false;
};

amp::DynamicScalerConfig AmpConfig(const Case& c) {
  const amp::ScalePolicy& p = c.policy;
  return {.InitialScale = p.InitialScale,
          .GrowthFactor = p.GrowthFactor,
          .BackoffFactor = p.BackoffFactor,
          .GrowthInterval = static_cast<int>(p.GrowthInterval),
          .MinScale = p.MinScale,
          .MaxScale = p.MaxScale,
          .Hysteresis = static_cast<int>(c.amp_hysteresis)};
}

mp::MixedPrecisionOptions MixedOptions(const Case& c) {
  const amp::ScalePolicy& p = c.policy;
  mp::MixedPrecisionOptions options = mp::MixedPrecisionOptions::ForFP16();
  options.Precision = c.precision;
  options.InitialLossScale = p.InitialScale;
  options.GrowthFactor = p.GrowthFactor;
  options.BackoffFactor = p.BackoffFactor;
  options.GrowthInterval = static_cast<int>(p.GrowthInterval);
  options.MinLossScale = p.MinScale;
  options.MaxLossScale = p.MaxScale;
  options.MaxConsecutiveOverflows = c.threshold;
  options.EnableAutoFallback = true;
  options.EnableGradientClipping = c.clipping;
  options.MaxGradNorm = 1.0f;
  return options;
}

fsdp::FSDPMixedPrecisionConfig FsdpConfig(const Case& c) {
  const amp::ScalePolicy& p = c.policy;
  fsdp::FSDPMixedPrecisionConfig config;
  config.ForwardDType = c.precision;
  config.UseLossScaling = c.fsdp_scaling;
  config.InitialLossScale = p.InitialScale;
  config.MinLossScale = p.MinScale;
  config.MaxLossScale = p.MaxScale;
  config.LossScaleGrowthFactor = p.GrowthFactor;
  config.LossScaleBackoffFactor = p.BackoffFactor;
  config.LossScaleSteps = static_cast<int>(p.GrowthInterval);
  return config;
}

// Every front end of the issue, built for one case and stepped together.
class InvariantFrontEnds {
 public:
  explicit InvariantFrontEnds(const Case& c)
      : case_(c),
        amp_scaler_(AmpConfig(c)),
        static_scaler_(c.static_scale),
        mixed_scaler_(MixedOptions(c)),
        manager_(MixedOptions(c)),
        layer_(MixedOptions(c)),
        grad_scaler_(AmpConfig(c)),
        static_grad_scaler_(amp::GradScaler::Static(c.static_scale)),
        context_scaler_(AmpConfig(c)),
        fsdp_(distributed::MakeLocalProcessGroup()),
        fsdp_manager_(FsdpConfig(c), fsdp_),
        amp_fsdp_(distributed::MakeLocalProcessGroup()),
        amp_unit_(&amp_fsdp_.RegisterUnit("unit", {{"w", FromVector({0.5f, -0.5f, 1.0f, 2.0f}, {4})}})),
        integration_(amp_fsdp_, FsdpConfig(c)),
        mixed_model_(c.policy, c.threshold),
        layer_model_(c.policy, c.threshold) {}

  // Runs step @p index on every front end; returns an empty string or what went wrong.
  std::string Step(std::size_t index) {
    const StepGradients& step = case_.steps[index];
    const bool poisoned = step.poison != Poison::None;
    std::string failure;
    const auto expect = [&](bool condition, const std::string& front_end, const std::string& what) {
      if (!condition && failure.empty()) {
        failure = front_end + ": " + what;
      }
    };
    const std::string input = " (input " + Name(step.poison) + ")";

    {  // amp::DynamicLossScaler: unscale and check in one pass, then the update.
      const amp::UnscaledGradients result = amp_scaler_.UnscaleGradientsAndCheck(Tensors(step, case_.dtype));
      expect(!poisoned || result.Overflow, "amp::DynamicLossScaler", "non-finite input not reported" + input);
      expect(result.Overflow || AllFinite(result.Gradients), "amp::DynamicLossScaler",
             "non-finite gradients without an overflow" + input);
      amp_scaler_.UpdateScale(result.Overflow);
    }
    {  // amp::StaticLossScaler
      const amp::UnscaledGradients result = static_scaler_.UnscaleGradientsAndCheck(Tensors(step, case_.dtype));
      expect(!poisoned || result.Overflow, "amp::StaticLossScaler", "non-finite input not reported" + input);
      expect(result.Overflow || AllFinite(result.Gradients), "amp::StaticLossScaler",
             "non-finite gradients without an overflow" + input);
    }
    {  // mixed_precision::DynamicLossScaler with PrecisionManager's fallback, the spec's flow.
      const GradientMap gradients = Tensors(step, case_.dtype);
      const bool skip = mixed_scaler_.CheckOverflowAndUpdate(gradients);
      const bool fell_back = manager_.CheckFallback(mixed_scaler_);
      expect(!poisoned || skip, "mixed_precision::DynamicLossScaler", "non-finite input not skipped" + input);
      expect(skip || AllFinite(mixed_scaler_.UnscaleGradients(gradients)), "mixed_precision::DynamicLossScaler",
             "kept step unscaled to non-finite values" + input);
      expect(fell_back == mixed_model_.Step(skip), "PrecisionManager",
             std::string(fell_back ? "fell back" : "did not fall back") + " against the at-minimum rule");
      expect(mixed_scaler_.CurrentScale() == mixed_model_.CurrentScale(), "mixed_precision::DynamicLossScaler",
             "scale differs from the shared rules");
    }
    {  // GradientConversionLayer (its own scaler and PrecisionManager, fallback on).
      const mp::GradientProcessingResult result = layer_.ProcessGradients(Tensors(step, case_.dtype));
      expect(!poisoned || result.ShouldSkip, "GradientConversionLayer", "non-finite input not skipped" + input);
      expect(!result.ShouldSkip || result.Gradients.empty(), "GradientConversionLayer",
             "skipped step returned gradients");
      expect(result.ShouldSkip || AllFinite(result.Gradients), "GradientConversionLayer",
             "non-finite gradients with ShouldSkip == false" + input);
      const bool expected_fallback = layer_model_.Step(result.ShouldSkip);
      expect(result.FellBackToFP32 == expected_fallback, "GradientConversionLayer",
             std::string(result.FellBackToFP32 ? "fell back" : "did not fall back") + " against the at-minimum rule");
      expect(!result.FellBackToFP32 || result.ShouldSkip, "GradientConversionLayer", "fell back on a kept step");
      expect(layer_.GetStats().FellBackToFP32 == layer_model_.FellBack(), "GradientConversionLayer",
             "stats disagree on the fallback");
      expect(layer_.CurrentScale() == layer_model_.CurrentScale(), "GradientConversionLayer",
             "scale differs from the shared rules");
      if (result.FellBackToFP32) {
        ++fallbacks;
      }
      if (layer_model_.FellBack() && !result.FellBackToFP32 && poisoned) {
        ++skipped_after_fallback;
      }
    }
    {  // GradScaler, dynamic and static: Scale(loss), then Step(optimizer).
      for (amp::GradScaler* scaler : {&grad_scaler_, &static_grad_scaler_}) {
        const std::string name = scaler == &grad_scaler_ ? "GradScaler (dynamic)" : "GradScaler (static)";
        CheckingOptimizer& optimizer = scaler == &grad_scaler_ ? grad_optimizer_ : static_optimizer_;
        const int steps_before = optimizer.steps;
        optimizer.Load(Tensors(step, case_.dtype));
        (void)scaler->Scale(Scalar(1.0f));
        const bool stepped = scaler->Step(optimizer);
        expect(!poisoned || !stepped, name, "stepped on a non-finite input" + input);
        expect(stepped == (optimizer.steps == steps_before + 1), name, "Step()'s result and the optimizer disagree");
        expect(optimizer.non_finite_steps == 0, name, "optimizer stepped with non-finite gradients" + input);
      }
    }
    {  // GradScalerContext: one RAII iteration per step.
      const int steps_before = context_optimizer_.steps;
      context_optimizer_.Load(Tensors(step, case_.dtype));
      amp::GradScalerContext context(context_scaler_, Scalar(1.0f));
      const bool stepped = context.Step(context_optimizer_);
      expect(!poisoned || !stepped, "GradScalerContext", "stepped on a non-finite input" + input);
      expect(stepped == (context_optimizer_.steps == steps_before + 1), "GradScalerContext",
             "Step()'s result and the optimizer disagree");
      expect(context_optimizer_.non_finite_steps == 0, "GradScalerContext",
             "optimizer stepped with non-finite gradients" + input);
    }
    {  // FSDPMixedPrecisionManager: unscale and check in one pass (also without loss scaling).
      const GradientMap gradients = Tensors(step, case_.dtype);
      const bool overflow = fsdp_manager_.UnscaleAndCheckOverflow(gradients);
      expect(!poisoned || overflow, "FSDPMixedPrecisionManager", "non-finite input not reported" + input);
      expect(overflow || AllFinite(gradients), "FSDPMixedPrecisionManager",
             "non-finite gradients without an overflow" + input);
    }
    {  // FSDPAmpIntegration over a sharding unit: FP32 gradient shard, agreed check, FSDP::Step.
      std::vector<float> shard(amp_unit_->ShardSize(), 0.25f);
      const std::vector<float>& source = step.values[0];
      std::copy_n(source.begin(), std::min(source.size(), shard.size()), shard.begin());
      amp_unit_->SetLocalGradient(FromVector(shard, {shard.size()}, case_.dtype));
      integration_.ApplyGradientFP32(*amp_unit_);
      const GradientMap gradients = amp_fsdp_.LocalGradients();
      const bool overflow = integration_.Manager().UnscaleAndCheckOverflow(gradients);
      const bool shard_poisoned = !std::ranges::all_of(source, [](float v) { return std::isfinite(v); });
      expect(!shard_poisoned || overflow, "FSDPAmpIntegration", "non-finite shard not reported" + input);
      if (overflow) {
        amp_fsdp_.ZeroGrad();
      } else {
        amp_fsdp_.Step(fsdp_optimizer_);
      }
      expect(fsdp_optimizer_.non_finite_steps == 0, "FSDPAmpIntegration",
             "optimizer stepped with non-finite gradients" + input);
    }
    return failure;
  }

  int fallbacks = 0;
  int skipped_after_fallback = 0;

 private:
  const Case& case_;
  amp::DynamicLossScaler amp_scaler_;
  amp::StaticLossScaler static_scaler_;
  mp::DynamicLossScaler mixed_scaler_;
  mp::PrecisionManager manager_;
  mp::GradientConversionLayer layer_;
  amp::GradScaler grad_scaler_;
  amp::GradScaler static_grad_scaler_;
  amp::GradScaler context_scaler_;
  CheckingOptimizer grad_optimizer_;
  CheckingOptimizer static_optimizer_;
  CheckingOptimizer context_optimizer_;
  CheckingOptimizer fsdp_optimizer_;
  fsdp::FSDP fsdp_;
  fsdp::FSDPMixedPrecisionManager fsdp_manager_;
  fsdp::FSDP amp_fsdp_;
  fsdp::FSDPShardingUnit* amp_unit_;
  fsdp::FSDPAmpIntegration integration_;
  FallbackModel mixed_model_;
  FallbackModel layer_model_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(OverflowInvariant)

BOOST_AUTO_TEST_CASE(NoNonFiniteGradientPassesAnyFrontEnd) {
  const std::uint64_t seed = mlframework::testing::PropertySeed() + 29;
  std::mt19937_64 rng(seed);
  int fallbacks = 0;
  int skipped_after_fallback = 0;
  std::int64_t poisoned_steps = 0;
  for (int index = 0; index < kCases; ++index) {
    const Case c = DrawCase(rng);
    InvariantFrontEnds ends(c);
    for (std::size_t step = 0; step < c.steps.size(); ++step) {
      const std::string failure = ends.Step(step);
      if (!failure.empty()) {
        BOOST_FAIL(failure << " at step " << step << " of " << DescribeCase(c, index, seed));
      }
      poisoned_steps += c.steps[step].poison != Poison::None ? 1 : 0;
    }
    fallbacks += ends.fallbacks;
    skipped_after_fallback += ends.skipped_after_fallback;
  }
  // The cases must reach the fallback and go on past it often, or the test proves little.
  BOOST_TEST(fallbacks >= kCases / 5,
             "only " << fallbacks << " of " << kCases << " cases fell back (seed " << seed << ")");
  BOOST_TEST(skipped_after_fallback >= kCases / 5,
             "only " << skipped_after_fallback << " non-finite steps after a fallback (seed " << seed << ")");
  BOOST_TEST_MESSAGE("OverflowInvariant: " << kCases << " cases of " << kInvariantSteps << " steps, " << poisoned_steps
                                           << " non-finite steps, " << fallbacks << " fallbacks, "
                                           << skipped_after_fallback << " non-finite steps after one (seed " << seed
                                           << ")");
}

BOOST_AUTO_TEST_SUITE_END()
