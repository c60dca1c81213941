// Fused multi-tensor Adam/AdamW and SGD (optimizers/FusedSteps.hpp) against the scalar reference
// steps (ReferenceSteps.hpp): bit-identical results over random lists of odd sizes and several
// steps, the FP16/BF16 copies written in the same pass, the found-inf skip, and the errors.
// CMake runs this suite again with each instruction set forced through MLFW_CPU_ISA.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/mlframework.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>

#include "amp/FakeDeviceBackend.hpp"
#include "optimizers/KernelNumerics.hpp"
#include "optimizers/OptimizerTestUtil.hpp"
#include "optimizers/ReferenceSteps.hpp"

using namespace mlframework;
using namespace mlframework::optimizers;
using namespace mlfw_test;

namespace {

// Sizes around the SIMD widths, the narrowing block (2048) and the chunk (32768 elements).
const std::vector<std::size_t> kSizes = {1, 3, 8, 15, 16, 17, 33, 1000, 2049, 4097, 40000, 70001};

// Distance in units in the last place (0 for equal bits; NaNs compare equal to NaNs).
std::uint32_t Ulps(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) {
    return 0;
  }
  auto ordered = [](float x) {
    const auto bits = std::bit_cast<std::int32_t>(x);
    return bits < 0 ? static_cast<std::int64_t>(INT32_MIN) - bits : static_cast<std::int64_t>(bits);
  };
  const std::int64_t d = ordered(a) - ordered(b);
  return static_cast<std::uint32_t>(d < 0 ? -d : d);
}

std::uint32_t MaxUlps(const std::vector<float>& a, const std::vector<float>& b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  std::uint32_t worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, Ulps(a[i], b[i]));
  }
  return worst;
}

TensorPtr Host(const std::vector<float>& values) { return FromVector(values, {values.size()}); }

// A list of FP32 tensors holding @p values.
std::vector<TensorPtr> Tensors(const std::vector<std::vector<float>>& values) {
  std::vector<TensorPtr> out;
  out.reserve(values.size());
  for (const auto& v : values) {
    out.push_back(Host(v));
  }
  return out;
}

std::vector<std::vector<float>> RandomList(std::mt19937& rng, float scale) {
  std::vector<std::vector<float>> out;
  out.reserve(kSizes.size());
  for (const std::size_t n : kSizes) {
    out.push_back(Random(n, rng, scale));
  }
  return out;
}

std::vector<std::vector<float>> ZeroList() {
  std::vector<std::vector<float>> out;
  out.reserve(kSizes.size());
  for (const std::size_t n : kSizes) {
    out.emplace_back(n, 0.0f);
  }
  return out;
}

AdamOptions ToOptions(const mlfw_reference::AdamConfig& c) {
  return AdamOptions{.LearningRate = c.lr,
                     .Beta1 = c.beta1,
                     .Beta2 = c.beta2,
                     .Epsilon = c.eps,
                     .WeightDecay = c.weight_decay,
                     .DecoupledWeightDecay = c.decoupled};
}

SGDOptions ToOptions(const mlfw_reference::SGDConfig& c) {
  return SGDOptions{.LearningRate = c.lr,
                    .Momentum = c.momentum,
                    .WeightDecay = c.weight_decay,
                    .Dampening = c.dampening,
                    .Nesterov = c.nesterov};
}

// Element values of every tensor of @p list, concatenated.
std::vector<float> Flat(const std::vector<TensorPtr>& list) {
  std::vector<float> out;
  for (const TensorPtr& t : list) {
    const std::vector<float> v = t->ToFloatVector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

std::vector<float> Flat(const std::vector<std::vector<float>>& list) {
  std::vector<float> out;
  for (const auto& v : list) {
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// The values of @p values rounded to @p dtype (CastInto's rounding).
std::vector<float> Rounded(const std::vector<float>& values, DataType dtype) {
  return Host(values)->CastTo(dtype)->ToFloatVector();
}

std::unique_ptr<DeviceScaleState> HostState() {
  const ScalePolicy policy;
  return HostScaling().CreateScaleState(Device::CPU(), policy, ScaleState::Initial(policy));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(FusedSteps)

BOOST_AUTO_TEST_CASE(AdamAndAdamWMatchTheReferenceToTheBit) {
  BOOST_TEST_MESSAGE("instruction set: " << backends::cpu::InstructionSet());
  const std::vector<mlfw_reference::AdamConfig> configs = {
      {},
      {.lr = 1e-2f, .weight_decay = 1e-2f},
      {.lr = 3e-3f, .weight_decay = 5e-2f, .decoupled = true},
      {.lr = 1e-4f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-6f, .weight_decay = 0.1f, .decoupled = true},
  };
  std::mt19937 rng(31);
  std::uint32_t worst = 0;
  for (const auto& config : configs) {
    auto ref_w = RandomList(rng, 1.0f);
    auto ref_m = ZeroList();
    auto ref_v = ZeroList();
    const std::vector<TensorPtr> w = Tensors(ref_w);
    const std::vector<TensorPtr> m = Tensors(ref_m);
    const std::vector<TensorPtr> v = Tensors(ref_v);
    for (std::int64_t step = 1; step <= 6; ++step) {
      const auto grads = RandomList(rng, 0.1f);
      const std::vector<TensorPtr> g = Tensors(grads);
      for (std::size_t t = 0; t < kSizes.size(); ++t) {
        mlfw_reference::AdamStep(ref_w[t], grads[t], ref_m[t], ref_v[t], config, step, Fused(), Root());
      }
      const OptimizerStepLists lists{.Parameters = w, .Gradients = g, .FirstState = m, .SecondState = v};
      BOOST_TEST(FusedAdamStep(lists, AdamStepScalarsFor(ToOptions(config), step)));
      worst = std::max(
          {worst, MaxUlps(Flat(w), Flat(ref_w)), MaxUlps(Flat(m), Flat(ref_m)), MaxUlps(Flat(v), Flat(ref_v))});
    }
  }
  BOOST_TEST_MESSAGE("largest distance from the reference: " << worst << " ulp");
  BOOST_TEST(worst == 0u);  // the same operations in the same order: the reference's bits
}

// The square root's special inputs in the vector bodies and the scalar tails: second moments of
// zero (a zero gradient on a zero moment), infinity (an infinite gradient or moment), NaN, a
// negative FP32 moment handed in by the caller (the root is NaN, as torch's), subnormal and tiny
// ones (the scaled path of MKL's root), each at every lane position of a vector.
BOOST_AUTO_TEST_CASE(AdamMatchesTheReferenceOnZeroInfiniteNaNNegativeAndTinyMoments) {
  BOOST_TEST_MESSAGE("instruction set: " << backends::cpu::InstructionSet());
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> moments = {0.0f,      -0.0f,     inf,       -inf, nan,  -1.0f,
                                      0x1p-149f, 0x1p-120f, 0x1p-101f, 1.0f, 4.0f, 0x1p100f};
  const std::vector<float> gradients = {0.0f, 1e-3f, -2.0f, inf, -inf, nan, 0x1p-80f, 3.0e19f};
  const std::size_t n = 101;  // six AVX-512 vectors, five AVX2 ones and a tail
  std::vector<float> ref_w(n), ref_m(n), ref_v(n), grad(n);
  for (std::size_t i = 0; i < n; ++i) {
    ref_w[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
    ref_m[i] = 0.01f * static_cast<float>(i % 5);
    ref_v[i] = moments[i % moments.size()];
    grad[i] = gradients[(i / moments.size()) % gradients.size()];
  }
  const mlfw_reference::AdamConfig config{.lr = 1e-2f, .weight_decay = 1e-2f, .decoupled = true};
  const std::vector<TensorPtr> w = {Host(ref_w)};
  const std::vector<TensorPtr> m = {Host(ref_m)};
  const std::vector<TensorPtr> v = {Host(ref_v)};
  mlfw_reference::AdamStep(ref_w, grad, ref_m, ref_v, config, 3, Fused(), Root());
  const std::vector<TensorPtr> g = {Host(grad)};
  const OptimizerStepLists lists{.Parameters = w, .Gradients = g, .FirstState = m, .SecondState = v};
  BOOST_TEST(FusedAdamStep(lists, AdamStepScalarsFor(ToOptions(config), 3)));
  BOOST_TEST(MaxUlps(w[0]->ToFloatVector(), ref_w) == 0u);
  BOOST_TEST(MaxUlps(m[0]->ToFloatVector(), ref_m) == 0u);
  BOOST_TEST(MaxUlps(v[0]->ToFloatVector(), ref_v) == 0u);
  std::size_t nans = 0;
  for (const float x : w[0]->ToFloatVector()) {
    nans += std::isnan(x) ? 1 : 0;
  }
  BOOST_TEST(nans < n);  // the case is not all NaN: finite lanes were compared too
}

BOOST_AUTO_TEST_CASE(AdamTakesTheRootOfTinySecondMomentsBesideOrdinaryOnes) {
  // Second moments from the smallest subnormal up to 2^-100, where MKL's root scales its input
  // (MklRoot()), alone in a vector or beside ordinary ones; an epsilon far below every root, so
  // that each weight's update is the first moment over the root itself and every bit of the root
  // shows in the weight.
  std::vector<float> tiny;
  for (const float x :
       {0x1p-149f, 0x1.8p-148f, 0x1p-127f, 0x1.4p-120f, 0x1.fffffep-101f, 0x1p-101f, 0x1.6a09e6p-110f}) {
    tiny.push_back(x);
  }
  const std::size_t n = 16 * 8 + 5;  // AVX-512 vectors: all tiny, mixed, none tiny; a tail
  std::vector<float> ref_w(n), ref_m(n), ref_v(n), grad(n, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t vector = i / 16;
    const bool is_tiny = vector < 2 || (vector < 6 && i % 3 != 0) || vector == 8;
    ref_v[i] = is_tiny ? tiny[i % tiny.size()] * static_cast<float>(1 + i % 5) : 1e-6f * static_cast<float>(1 + i % 7);
    ref_m[i] = std::sqrt(ref_v[i]) * (0.75f + 0.01f * static_cast<float>(i % 13));
    ref_w[i] = 1.0f + 0.125f * static_cast<float>(i % 9);
  }
  const mlfw_reference::AdamConfig config{.lr = 1e-3f, .eps = 0x1p-149f};
  const std::vector<TensorPtr> w = {Host(ref_w)};
  const std::vector<TensorPtr> m = {Host(ref_m)};
  const std::vector<TensorPtr> v = {Host(ref_v)};
  mlfw_reference::AdamStep(ref_w, grad, ref_m, ref_v, config, 2, Fused(), Root());
  const std::vector<TensorPtr> g = {Host(grad)};
  const OptimizerStepLists lists{.Parameters = w, .Gradients = g, .FirstState = m, .SecondState = v};
  BOOST_TEST(FusedAdamStep(lists, AdamStepScalarsFor(ToOptions(config), 2)));
  BOOST_TEST(MaxUlps(w[0]->ToFloatVector(), ref_w) == 0u);
  BOOST_TEST(MaxUlps(v[0]->ToFloatVector(), ref_v) == 0u);
}

BOOST_AUTO_TEST_CASE(SGDMatchesTheReferenceToTheBit) {
  const std::vector<mlfw_reference::SGDConfig> configs = {
      {.lr = 0.1f},
      {.lr = 0.05f, .weight_decay = 1e-3f},
      {.lr = 0.01f, .momentum = 0.9f, .weight_decay = 1e-4f},
      {.lr = 0.02f, .momentum = 0.5f, .weight_decay = 1e-2f, .nesterov = true},
      {.lr = 0.01, .momentum = 0.9, .weight_decay = 1e-4, .dampening = 0.25},
  };
  std::mt19937 rng(7);
  std::uint32_t worst = 0;
  for (const auto& config : configs) {
    auto ref_w = RandomList(rng, 1.0f);
    auto ref_b = ZeroList();
    const std::vector<TensorPtr> w = Tensors(ref_w);
    const std::vector<TensorPtr> b = Tensors(ref_b);
    const bool momentum = config.momentum != 0.0;
    for (int step = 1; step <= 5; ++step) {
      const auto grads = RandomList(rng, 0.1f);
      const std::vector<TensorPtr> g = Tensors(grads);
      for (std::size_t t = 0; t < kSizes.size(); ++t) {
        mlfw_reference::SGDStep(ref_w[t], grads[t], ref_b[t], config, step == 1, Fused());
      }
      const OptimizerStepLists lists{
          .Parameters = w,
          .Gradients = g,
          .FirstState = momentum ? std::span<const TensorPtr>(b) : std::span<const TensorPtr>()};
      BOOST_TEST(FusedSGDStep(lists, SGDStepScalarsFor(ToOptions(config), step == 1)));
      worst = std::max(worst, MaxUlps(Flat(w), Flat(ref_w)));
      if (momentum) {
        worst = std::max(worst, MaxUlps(Flat(b), Flat(ref_b)));
      }
    }
  }
  BOOST_TEST(worst == 0u);
}

BOOST_AUTO_TEST_CASE(LowPrecisionCopiesAreTheRoundedUpdatedParameters) {
  std::mt19937 rng(3);
  const std::vector<TensorPtr> w = Tensors(RandomList(rng, 1.0f));
  const std::vector<TensorPtr> g = Tensors(RandomList(rng, 0.1f));
  const std::vector<TensorPtr> m = Tensors(ZeroList());
  const std::vector<TensorPtr> v = Tensors(ZeroList());
  std::vector<TensorPtr> copies;
  for (std::size_t t = 0; t < kSizes.size(); ++t) {
    // BF16, FP16 and no copy in turn.
    copies.push_back(t % 3 == 2 ? nullptr : Zeros({kSizes[t]}, t % 3 == 0 ? DataType::BFloat16 : DataType::Float16));
  }
  const OptimizerStepLists adam{
      .Parameters = w, .Gradients = g, .FirstState = m, .SecondState = v, .LowPrecisionCopies = copies};
  BOOST_TEST(FusedAdamStep(adam, AdamStepScalarsFor(AdamOptions{}, 1)));
  for (std::size_t t = 0; t < kSizes.size(); ++t) {
    if (copies[t]) {
      BOOST_TEST(copies[t]->ToFloatVector() == Rounded(w[t]->ToFloatVector(), copies[t]->GetDataType()));
    }
  }
  const std::vector<TensorPtr> b = Tensors(ZeroList());
  const OptimizerStepLists sgd{.Parameters = w, .Gradients = g, .FirstState = b, .LowPrecisionCopies = copies};
  BOOST_TEST(FusedSGDStep(sgd, SGDStepScalarsFor(SGDOptions{.Momentum = 0.9f}, true)));
  for (std::size_t t = 0; t < kSizes.size(); ++t) {
    if (copies[t]) {
      BOOST_TEST(copies[t]->ToFloatVector() == Rounded(w[t]->ToFloatVector(), copies[t]->GetDataType()));
    }
  }
}

BOOST_AUTO_TEST_CASE(ASetFoundInfFlagSkipsTheStep) {
  std::mt19937 rng(5);
  const std::vector<TensorPtr> w = Tensors(RandomList(rng, 1.0f));
  const std::vector<TensorPtr> g = Tensors(RandomList(rng, 0.1f));
  const std::vector<TensorPtr> m = Tensors(ZeroList());
  const std::vector<TensorPtr> v = Tensors(ZeroList());
  const std::vector<float> before = Flat(w);
  const std::unique_ptr<DeviceScaleState> state = HostState();
  state->MarkFoundInf();
  const OptimizerStepLists adam{.Parameters = w, .Gradients = g, .FirstState = m, .SecondState = v};
  BOOST_TEST(!FusedAdamStep(adam, AdamStepScalarsFor(AdamOptions{}, 1), state.get()));
  const OptimizerStepLists sgd{.Parameters = w, .Gradients = g, .FirstState = m};
  BOOST_TEST(!FusedSGDStep(sgd, SGDStepScalarsFor(SGDOptions{.Momentum = 0.9f}, true), state.get()));
  BOOST_TEST(MaxUlps(Flat(w), before) == 0u);
  BOOST_TEST(MaxUlps(Flat(m), Flat(ZeroList())) == 0u);
  BOOST_TEST(MaxUlps(Flat(v), Flat(ZeroList())) == 0u);
  state->ClearFoundInf();
  BOOST_TEST(FusedAdamStep(adam, AdamStepScalarsFor(AdamOptions{}, 1), state.get()));
  BOOST_TEST(MaxUlps(Flat(w), before) > 0u);

  // The optimizer classes: a skipped step keeps the step count (Adam's bias correction).
  Adam optimizer(OneParam({1.0f, 2.0f, 3.0f}, DataType::BFloat16));
  optimizer.SetGradients(OneGrad({0.5f, -0.5f, 1.0f}, DataType::Float32));
  state->MarkFoundInf();
  BOOST_TEST(!optimizer.Step(*state));
  BOOST_TEST(optimizer.StepCount() == 0);
  BOOST_TEST(Values(optimizer.Parameters().at("w")) == (std::vector<float>{1.0f, 2.0f, 3.0f}));
  state->ClearFoundInf();
  BOOST_TEST(optimizer.Step(*state));
  BOOST_TEST(optimizer.StepCount() == 1);
  SGD sgd_optimizer(OneParam({1.0f, 2.0f}, DataType::Float32), SGDOptions{.LearningRate = 0.5f});
  sgd_optimizer.SetGradients(OneGrad({1.0f, 1.0f}, DataType::Float32));
  state->MarkFoundInf();
  BOOST_TEST(!sgd_optimizer.Step(*state));
  BOOST_TEST(Values(sgd_optimizer.Parameters().at("w")) == (std::vector<float>{1.0f, 2.0f}));
  state->ClearFoundInf();
  BOOST_TEST(sgd_optimizer.Step(*state));
  BOOST_TEST(Values(sgd_optimizer.Parameters().at("w")) == (std::vector<float>{0.5f, 1.5f}));
}

// The step count kept in a tensor (torch's `capturable` state["step"]): each step reads it, runs
// as step count + 1 and counts itself only when it steps, so a skipped step leaves the bias
// correction of the next one right. Compared with steps whose number the caller counts.
BOOST_AUTO_TEST_CASE(AStepCountInATensorCountsOnlyTheStepsTaken) {
  std::mt19937 rng(9);
  const std::vector<std::vector<float>> w0 = RandomList(rng, 1.0f);
  const std::vector<TensorPtr> g = Tensors(RandomList(rng, 0.1f));
  const std::vector<TensorPtr> w = Tensors(w0);
  const std::vector<TensorPtr> m = Tensors(ZeroList());
  const std::vector<TensorPtr> v = Tensors(ZeroList());
  const std::vector<TensorPtr> b = Tensors(ZeroList());
  const std::vector<TensorPtr> ref_w = Tensors(w0);
  const std::vector<TensorPtr> ref_m = Tensors(ZeroList());
  const std::vector<TensorPtr> ref_v = Tensors(ZeroList());
  const std::vector<TensorPtr> ref_b = Tensors(ZeroList());
  const TensorPtr adam_count = Zeros({1});
  const TensorPtr sgd_count = Zeros({1});
  const std::unique_ptr<DeviceScaleState> state = HostState();
  const AdamOptions adam = AdamOptions::AdamW(3e-3, 1e-2);
  const SGDOptions sgd{.LearningRate = 0.01, .Momentum = 0.9, .Dampening = 0.5};
  const OptimizerStepLists counted_adam{
      .Parameters = w, .Gradients = g, .FirstState = m, .SecondState = v, .StepCount = adam_count};
  const OptimizerStepLists counted_sgd{.Parameters = w, .Gradients = g, .FirstState = b, .StepCount = sgd_count};
  std::int64_t taken = 0;
  for (const bool overflow : {true, false, true, true, false, false}) {
    overflow ? state->MarkFoundInf() : state->ClearFoundInf();
    // The scalars of a step other than the counted one: the count decides.
    BOOST_TEST(FusedAdamStep(counted_adam, AdamStepScalarsFor(adam, 7), state.get()) == !overflow);
    BOOST_TEST(FusedSGDStep(counted_sgd, SGDStepScalarsFor(sgd, false), state.get()) == !overflow);
    if (!overflow) {
      ++taken;
      BOOST_TEST(FusedAdamStep({.Parameters = ref_w, .Gradients = g, .FirstState = ref_m, .SecondState = ref_v},
                               AdamStepScalarsFor(adam, taken)));
      BOOST_TEST(
          FusedSGDStep({.Parameters = ref_w, .Gradients = g, .FirstState = ref_b}, SGDStepScalarsFor(sgd, taken == 1)));
    }
    BOOST_TEST(adam_count->ToFloatVector() == std::vector<float>{static_cast<float>(taken)});
    BOOST_TEST(sgd_count->ToFloatVector() == std::vector<float>{static_cast<float>(taken)});
    BOOST_TEST(MaxUlps(Flat(w), Flat(ref_w)) == 0u);
    BOOST_TEST(MaxUlps(Flat(m), Flat(ref_m)) == 0u);
    BOOST_TEST(MaxUlps(Flat(v), Flat(ref_v)) == 0u);
    BOOST_TEST(MaxUlps(Flat(b), Flat(ref_b)) == 0u);
  }
  BOOST_TEST(taken == 3);
}

BOOST_AUTO_TEST_CASE(AnInvalidStepCountThrowsAndChangesNothing) {
  std::mt19937 rng(10);
  const std::vector<TensorPtr> w = Tensors(RandomList(rng, 1.0f));
  const std::vector<TensorPtr> g = Tensors(RandomList(rng, 0.1f));
  const std::vector<TensorPtr> m = Tensors(ZeroList());
  const std::vector<TensorPtr> v = Tensors(ZeroList());
  const std::vector<float> before = Flat(w);
  const AdamStepScalars scalars = AdamStepScalarsFor(AdamOptions{}, 1);
  auto step_with = [&](const TensorPtr& count) {
    FusedAdamStep({.Parameters = w, .Gradients = g, .FirstState = m, .SecondState = v, .StepCount = count}, scalars);
  };
  const auto names_the_count = [](const ArgumentError& e) { return e.Parameter() == "lists.StepCount"; };
  BOOST_CHECK_EXCEPTION(step_with(Zeros({1}, DataType::BFloat16)), ArgumentError, names_the_count);
  BOOST_CHECK_EXCEPTION(step_with(Zeros({2})), ArgumentError, names_the_count);
  for (const float bad : {-1.0f, 2.5f, 16777216.0f, std::nanf("")}) {
    const TensorPtr count = FromVector({bad}, {1});
    BOOST_CHECK_EXCEPTION(step_with(count), ArgumentError, names_the_count);
    BOOST_TEST(std::bit_cast<std::uint32_t>(count->ToFloatVector()[0]) == std::bit_cast<std::uint32_t>(bad));
  }
  // A count in device memory with lists in host memory.
  BOOST_CHECK_THROW(step_with(FakeTensor({0.0f}, {1}, DataType::Float32)), ArgumentError);
  BOOST_TEST(MaxUlps(Flat(w), before) == 0u);
  BOOST_TEST(MaxUlps(Flat(m), Flat(ZeroList())) == 0u);
}

BOOST_AUTO_TEST_CASE(InvalidListsThrowAndWriteNothing) {
  const std::vector<TensorPtr> w = {Host({1.0f, 2.0f}), Host({3.0f})};
  const std::vector<TensorPtr> g = {Host({0.5f, 0.5f}), Host({0.5f})};
  const std::vector<TensorPtr> m = {Host({0.0f, 0.0f}), Host({0.0f})};
  const std::vector<TensorPtr> v = {Host({0.0f, 0.0f}), Host({0.0f})};
  const AdamStepScalars scalars = AdamStepScalarsFor(AdamOptions{}, 1);
  auto unchanged = [&] { return Flat(w) == (std::vector<float>{1.0f, 2.0f, 3.0f}); };

  const std::vector<TensorPtr> short_g = {g[0]};
  BOOST_CHECK_THROW(FusedAdamStep({.Parameters = w, .Gradients = short_g, .FirstState = m, .SecondState = v}, scalars),
                    ArgumentError);
  const std::vector<TensorPtr> null_g = {g[0], nullptr};
  BOOST_CHECK_THROW(FusedAdamStep({.Parameters = w, .Gradients = null_g, .FirstState = m, .SecondState = v}, scalars),
                    ArgumentNullError);
  const std::vector<TensorPtr> half_g = {g[0], FromVector({0.5f}, {1}, DataType::BFloat16)};
  BOOST_CHECK_THROW(FusedAdamStep({.Parameters = w, .Gradients = half_g, .FirstState = m, .SecondState = v}, scalars),
                    ArgumentError);
  const std::vector<TensorPtr> long_m = {m[0], Host({0.0f, 0.0f})};
  BOOST_CHECK_THROW(FusedAdamStep({.Parameters = w, .Gradients = g, .FirstState = long_m, .SecondState = v}, scalars),
                    ArgumentError);
  const std::vector<TensorPtr> fp32_copy = {nullptr, Host({0.0f})};
  BOOST_CHECK_THROW(
      FusedAdamStep(
          {.Parameters = w, .Gradients = g, .FirstState = m, .SecondState = v, .LowPrecisionCopies = fp32_copy},
          scalars),
      ArgumentError);
  // SGD without momentum takes no buffers, with momentum one per parameter.
  BOOST_CHECK_THROW(FusedSGDStep({.Parameters = w, .Gradients = g, .FirstState = m}, SGDStepScalarsFor({}, true)),
                    ArgumentError);
  BOOST_CHECK_THROW(FusedSGDStep({.Parameters = w, .Gradients = g}, SGDStepScalarsFor({.Momentum = 0.9f}, true)),
                    ArgumentError);
  // Memory the host cannot address, on no backend: nothing can run it.
  const std::vector<TensorPtr> foreign_g = {g[0], std::make_shared<ForeignTensor>(Host({0.5f}), false)};
  BOOST_CHECK_THROW(
      FusedAdamStep({.Parameters = w, .Gradients = foreign_g, .FirstState = m, .SecondState = v}, scalars),
      ArgumentError);
  BOOST_TEST(unchanged());
  BOOST_CHECK_THROW(static_cast<void>(AdamStepScalarsFor(AdamOptions{}, 0)), ArgumentError);
  BOOST_CHECK_THROW(static_cast<void>(AdamStepScalarsFor(AdamOptions{.Beta1 = 1.0f}, 1)), ArgumentError);
  BOOST_CHECK_THROW(static_cast<void>(SGDStepScalarsFor(SGDOptions{.LearningRate = -1.0f}, true)), ArgumentError);
  // An empty list is a step with nothing to do.
  BOOST_TEST(FusedAdamStep({}, scalars));
}

// A tensor the step writes (a parameter, a state, a copy) over memory another entry uses would be
// updated twice (a parameter listed twice) or read after the step changed it (a state over its
// parameter): refused naming both entries, nothing written. Gradients are only read: one gradient
// for two parameters steps both.
BOOST_AUTO_TEST_CASE(TensorsTheStepWritesNeedMemoryOfTheirOwn) {
  const AdamStepScalars scalars = AdamStepScalarsFor(AdamOptions{}, 1);
  const auto message_of = [](auto&& step) -> std::string {
    try {
      step();
    } catch (const ArgumentError& e) {
      return e.what();
    }
    return "";
  };
  const std::vector<TensorPtr> w = {Host({1.0f, 2.0f}), Host({3.0f, 4.0f})};
  const std::vector<TensorPtr> g = {Host({0.5f, 0.5f}), Host({0.5f, 0.5f})};
  const std::vector<TensorPtr> m = {Host({0.0f, 0.0f}), Host({0.0f, 0.0f})};
  const std::vector<TensorPtr> v = {Host({0.0f, 0.0f}), Host({0.0f, 0.0f})};
  const auto unchanged = [&] {
    return Flat(w) == (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}) && Flat(g) == std::vector<float>(4, 0.5f) &&
           Flat(m) == std::vector<float>(4, 0.0f) && Flat(v) == std::vector<float>(4, 0.0f);
  };

  const std::vector<TensorPtr> twice = {w[0], w[0]};
  const std::string listed_twice = message_of(
      [&] { FusedAdamStep({.Parameters = twice, .Gradients = g, .FirstState = m, .SecondState = v}, scalars); });
  BOOST_TEST(listed_twice.find("'lists.Parameters[1]': is the same memory as lists.Parameters[0]") != std::string::npos,
             listed_twice);
  const std::vector<TensorPtr> m_is_w = {m[0], w[1]};
  const std::string state_over_parameter = message_of(
      [&] { FusedAdamStep({.Parameters = w, .Gradients = g, .FirstState = m_is_w, .SecondState = v}, scalars); });
  BOOST_TEST(state_over_parameter.find("lists.Parameters[1]") != std::string::npos, state_over_parameter);
  BOOST_TEST(state_over_parameter.find("lists.FirstState[1]") != std::string::npos, state_over_parameter);
  // A parameter over its gradient: the gradient is read, but the parameter is written.
  const std::vector<TensorPtr> g_is_w = {g[0], w[1]};
  BOOST_TEST(!message_of([&] {
                FusedAdamStep({.Parameters = w, .Gradients = g_is_w, .FirstState = m, .SecondState = v}, scalars);
              }).empty());
  // SGD's momentum buffer over a gradient.
  const std::vector<TensorPtr> buffers = {m[0], g[1]};
  const std::string buffer_over_gradient = message_of([&] {
    FusedSGDStep({.Parameters = w, .Gradients = g, .FirstState = buffers}, SGDStepScalarsFor({.Momentum = 0.9f}, true));
  });
  BOOST_TEST(buffer_over_gradient.find("lists.FirstState[1]") != std::string::npos, buffer_over_gradient);
  BOOST_TEST(buffer_over_gradient.find("lists.Gradients[1]") != std::string::npos, buffer_over_gradient);
  // A BF16 copy over the parameter's memory.
  const std::vector<TensorPtr> copies = {
      nullptr, backends::cpu::Wrap(w[1]->MutableHostBytes().data(), {2}, DataType::BFloat16, nullptr)};
  BOOST_TEST(!message_of([&] {
                FusedAdamStep(
                    {.Parameters = w, .Gradients = g, .FirstState = m, .SecondState = v, .LowPrecisionCopies = copies},
                    scalars);
              }).empty());
  BOOST_TEST(unchanged());

  // Views of one buffer: overlapping ones are refused, adjacent ones step.
  std::vector<float> storage(8, 0.0f);
  const auto view = [&](std::size_t first, std::size_t count) {
    return backends::cpu::Wrap(storage.data() + first, {count}, DataType::Float32, nullptr);
  };
  const std::vector<TensorPtr> one_w = {w[0]};
  const std::vector<TensorPtr> one_g = {g[0]};
  const std::vector<TensorPtr> overlapping_m = {view(0, 2)};
  const std::vector<TensorPtr> overlapping_v = {view(1, 2)};
  const std::string overlap = message_of([&] {
    FusedAdamStep({.Parameters = one_w, .Gradients = one_g, .FirstState = overlapping_m, .SecondState = overlapping_v},
                  scalars);
  });
  BOOST_TEST(overlap.find("'lists.SecondState[0]': overlaps the memory of lists.FirstState[0]") != std::string::npos,
             overlap);
  BOOST_TEST(storage == std::vector<float>(8, 0.0f));
  BOOST_TEST(unchanged());
  const std::vector<TensorPtr> adjacent_v = {view(2, 2)};
  BOOST_TEST(FusedAdamStep(
      {.Parameters = one_w, .Gradients = one_g, .FirstState = overlapping_m, .SecondState = adjacent_v}, scalars));
  // Checked again after a list that shares nothing has stepped (and is remembered as such).
  BOOST_TEST(
      !message_of([&] {
         FusedAdamStep(
             {.Parameters = one_w, .Gradients = one_g, .FirstState = overlapping_m, .SecondState = overlapping_v},
             scalars);
       }).empty());

  // One gradient for both parameters steps both alike.
  const std::vector<TensorPtr> same_w = {Host({1.0f, 2.0f}), Host({1.0f, 2.0f})};
  const std::vector<TensorPtr> shared_g = {g[0], g[0]};
  BOOST_TEST(FusedAdamStep({.Parameters = same_w, .Gradients = shared_g, .FirstState = m, .SecondState = v}, scalars));
  BOOST_TEST(same_w[0]->ToFloatVector() == same_w[1]->ToFloatVector());
  BOOST_TEST(same_w[0]->ToFloatVector()[0] < 1.0f);

  // Device tensors compare as objects: one listed twice is refused before the backend runs.
  const std::vector<TensorPtr> fake_w = {FakeTensor({1.0f}, {1}, DataType::Float32)};
  const std::vector<TensorPtr> fake_g = {FakeTensor({0.5f}, {1}, DataType::Float32)};
  const std::vector<TensorPtr> fake_m = {fake_w[0]};
  const std::vector<TensorPtr> fake_v = {FakeTensor({0.0f}, {1}, DataType::Float32)};
  const std::string device = message_of([&] {
    FusedAdamStep({.Parameters = fake_w, .Gradients = fake_g, .FirstState = fake_m, .SecondState = fake_v}, scalars);
  });
  BOOST_TEST(device.find("'lists.FirstState[0]': is the same tensor as lists.Parameters[0]") != std::string::npos,
             device);
}

BOOST_AUTO_TEST_CASE(DeviceTensorsGoToTheirBackend) {
  // A backend without fused optimizer kernels (the TensorBackend defaults) is named in the error.
  auto fake = [](const std::vector<float>& values) {
    const std::size_t n = values.size();
    return FakeTensor(values, {n}, DataType::Float32);
  };
  const std::vector<TensorPtr> w = {fake({1.0f, 2.0f})};
  const std::vector<TensorPtr> g = {fake({0.5f, 0.5f})};
  const std::vector<TensorPtr> m = {fake({0.0f, 0.0f})};
  const std::vector<TensorPtr> v = {fake({0.0f, 0.0f})};
  const std::vector<TensorPtr> host_v = {Host({0.0f, 0.0f})};
  const AdamStepScalars scalars = AdamStepScalarsFor(AdamOptions{}, 1);
  try {
    FusedAdamStep({.Parameters = w, .Gradients = g, .FirstState = m, .SecondState = v}, scalars);
    BOOST_FAIL("expected InvalidOperationError");
  } catch (const InvalidOperationError& error) {
    BOOST_TEST(std::string(error.what()).find(FakeBackend().Name()) != std::string::npos);
  }
  BOOST_CHECK_THROW(FusedSGDStep({.Parameters = w, .Gradients = g}, SGDStepScalarsFor({}, true)),
                    InvalidOperationError);
  // Host memory and device tensors in one call: one kind per call.
  BOOST_CHECK_THROW(FusedAdamStep({.Parameters = w, .Gradients = g, .FirstState = m, .SecondState = host_v}, scalars),
                    ArgumentError);
  BOOST_TEST(Peek(w[0]) == (std::vector<float>{1.0f, 2.0f}));
}

BOOST_AUTO_TEST_CASE(OptimizerClassesWriteTheirHalfParametersInTheFusedPass) {
  std::mt19937 rng(11);
  const mlfw_reference::AdamConfig config{.lr = 1e-2f, .weight_decay = 1e-2f, .decoupled = true};
  const std::vector<float> start_a = Random(4097, rng, 1.0f);
  const std::vector<float> start_b = Random(33, rng, 1.0f);
  // "a" in host memory (written in the fused pass), "b" in memory the host cannot address
  // (written back by a cast after the pass).
  const GradientMap params = {
      {"a", FromVector(start_a, {start_a.size()}, DataType::BFloat16)},
      {"b", std::make_shared<ForeignTensor>(FromVector(start_b, {start_b.size()}, DataType::Float16), false)}};
  Adam adam(params, ToOptions(config));
  std::vector<float> ref_a = Rounded(start_a, DataType::BFloat16);
  std::vector<float> ref_b = Rounded(start_b, DataType::Float16);
  std::vector<float> ma(ref_a.size()), va(ref_a.size()), mb(ref_b.size()), vb(ref_b.size());
  for (std::int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> ga = Random(ref_a.size(), rng, 0.1f);
    const std::vector<float> gb = Random(ref_b.size(), rng, 0.1f);
    adam.SetGradients({{"a", FromVector(ga, {ga.size()}, DataType::BFloat16)}, {"b", Host(gb)}});
    adam.Step();
    mlfw_reference::AdamStep(ref_a, Rounded(ga, DataType::BFloat16), ma, va, config, step, Fused(), Root());
    mlfw_reference::AdamStep(ref_b, gb, mb, vb, config, step, Fused(), Root());
    BOOST_TEST(MaxUlps(Values(adam.MasterWeights().at("a")), ref_a) == 0u);
    BOOST_TEST(MaxUlps(Values(adam.MasterWeights().at("b")), ref_b) == 0u);
    BOOST_TEST(Values(params.at("a")) == Rounded(ref_a, DataType::BFloat16));
    BOOST_TEST(Values(params.at("b")) == Rounded(ref_b, DataType::Float16));
  }

  const mlfw_reference::SGDConfig sgd_config{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f, .nesterov = true};
  const TensorPtr half = FromVector(start_a, {start_a.size()}, DataType::Float16);
  SGD sgd({{"w", half}}, ToOptions(sgd_config));
  std::vector<float> ref = Rounded(start_a, DataType::Float16);
  std::vector<float> buffer(ref.size());
  for (int step = 1; step <= 3; ++step) {
    const std::vector<float> g = Random(ref.size(), rng, 0.1f);
    sgd.SetGradients({{"w", Host(g)}});
    sgd.Step();
    mlfw_reference::SGDStep(ref, g, buffer, sgd_config, step == 1, Fused());
    BOOST_TEST(MaxUlps(Values(sgd.MasterWeights().at("w")), ref) == 0u);
    BOOST_TEST(Values(half) == Rounded(ref, DataType::Float16));
  }
}

BOOST_AUTO_TEST_SUITE_END()
