// End to end: a 2-layer MLP with FP16 parameters and FP16 activations and gradients at
// layer boundaries, trained with FP32 master weights (Adam), a dynamic GradScaler and
// GradScalerContext, reaches the final loss of the same model trained in FP32 (within 1%).
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Float16.hpp>

#include "amp/AmpTestUtil.hpp"

using namespace mlframework;
using mlframework::amp::DynamicScalerConfig;
using mlframework::amp::GradScaler;
using mlframework::amp::GradScalerContext;
using mlframework::optimizers::Adam;
using mlframework::optimizers::AdamOptions;

namespace {

constexpr std::size_t kSamples = 512;
constexpr std::size_t kIn = 8;
constexpr std::size_t kHidden = 16;
constexpr int kSteps = 300;

// A fixed regression problem: a random tanh teacher plus noise (so the loss has a floor
// that both precisions reach, well above FP16 rounding effects).
struct Problem {
  std::vector<float> x;  // kSamples x kIn
  std::vector<float> y;  // kSamples
};

Problem MakeProblem() {
  std::mt19937 rng(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Problem p;
  p.x.resize(kSamples * kIn);
  for (float& v : p.x) {
    v = normal(rng);
  }
  std::vector<float> teacher(kIn * 4);
  for (float& v : teacher) {
    v = 0.5f * normal(rng);
  }
  p.y.resize(kSamples);
  for (std::size_t i = 0; i < kSamples; ++i) {
    float out = 0.0f;
    for (std::size_t j = 0; j < 4; ++j) {
      float z = 0.0f;
      for (std::size_t k = 0; k < kIn; ++k) {
        z += p.x[i * kIn + k] * teacher[k * 4 + j];
      }
      out += std::tanh(z);
    }
    p.y[i] = out + 0.3f * normal(rng);
  }
  return p;
}

GradientMap InitialParameters(DataType dtype) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::size_t n, float std) {
    std::vector<float> v(n);
    for (float& e : v) {
      e = std * normal(rng);
    }
    return v;
  };
  return {{"W1", FromVector(fill(kIn * kHidden, 0.35f), {kIn, kHidden}, dtype)},
          {"b1", FromVector(std::vector<float>(kHidden, 0.0f), {kHidden}, dtype)},
          {"W2", FromVector(fill(kHidden, 0.25f), {kHidden, 1}, dtype)},
          {"b2", FromVector({0.0f}, {1}, dtype)}};
}

// Identity in FP32; round-to-nearest-even through binary16 in the mixed-precision run.
struct Rounding {
  bool half = false;
  float operator()(float v) const { return half ? static_cast<float>(Float16(v)) : v; }
};

struct Pass {
  double loss = 0.0;  // unscaled mean squared error, accumulated in FP32/FP64 (as autocast does)
  GradientMap grads;  // gradients of seed * loss, in the parameters' dtype
};

// Forward and backward of the MLP. Activations and the gradients flowing between layers are
// rounded by @p r; parameter gradients accumulate in FP32 (as FP16 GEMMs do) and are stored
// in @p grad_dtype. @p seed is d(scaled loss)/d(loss): the loss scale.
Pass ForwardBackward(const GradientMap& params, const Problem& p, Rounding r, float seed, DataType grad_dtype) {
  const auto w1 = params.at("W1")->ToFloatVector();
  const auto b1 = params.at("b1")->ToFloatVector();
  const auto w2 = params.at("W2")->ToFloatVector();
  const float b2 = params.at("b2")->ToFloatVector()[0];
  std::vector<float> h(kSamples * kHidden);
  std::vector<float> out(kSamples);
  Pass pass;
  for (std::size_t i = 0; i < kSamples; ++i) {
    float o = 0.0f;
    for (std::size_t j = 0; j < kHidden; ++j) {
      float z = b1[j];
      for (std::size_t k = 0; k < kIn; ++k) {
        z += r(p.x[i * kIn + k]) * w1[k * kHidden + j];
      }
      h[i * kHidden + j] = r(std::tanh(r(z)));
      o += h[i * kHidden + j] * w2[j];
    }
    out[i] = r(o + b2);
    const double err = static_cast<double>(out[i]) - p.y[i];
    pass.loss += err * err / kSamples;
  }
  std::vector<float> dw1(kIn * kHidden, 0.0f), db1(kHidden, 0.0f), dw2(kHidden, 0.0f);
  float db2 = 0.0f;
  for (std::size_t i = 0; i < kSamples; ++i) {
    const float dout = r(seed * 2.0f * (out[i] - p.y[i]) / static_cast<float>(kSamples));
    db2 += dout;
    for (std::size_t j = 0; j < kHidden; ++j) {
      const float hij = h[i * kHidden + j];
      dw2[j] += hij * dout;
      const float dz = r(r(dout * w2[j]) * (1.0f - hij * hij));
      db1[j] += dz;
      for (std::size_t k = 0; k < kIn; ++k) {
        dw1[k * kHidden + j] += r(p.x[i * kIn + k]) * dz;
      }
    }
  }
  pass.grads = {{"W1", FromVector(dw1, {kIn, kHidden}, grad_dtype)},
                {"b1", FromVector(db1, {kHidden}, grad_dtype)},
                {"W2", FromVector(dw2, {kHidden, 1}, grad_dtype)},
                {"b2", FromVector({db2}, {1}, grad_dtype)}};
  return pass;
}

double EvaluateFp32(const GradientMap& params, const Problem& p) {
  return ForwardBackward(params, p, Rounding{false}, 1.0f, DataType::Float32).loss;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(MixedPrecisionTraining)

BOOST_AUTO_TEST_CASE(Fp16WithMasterWeightsAndGradScalerMatchesFp32) {
  const Problem problem = MakeProblem();
  const AdamOptions options{.LearningRate = 0.01f};

  // FP32 reference.
  const GradientMap params32 = InitialParameters(DataType::Float32);
  Adam adam32(params32, options);
  const double initial_loss = EvaluateFp32(params32, problem);
  for (int step = 0; step < kSteps; ++step) {
    adam32.SetGradients(ForwardBackward(params32, problem, Rounding{false}, 1.0f, DataType::Float32).grads);
    adam32.Step();
  }
  const double loss32 = EvaluateFp32(params32, problem);

  // Mixed precision: FP16 parameters, FP32 masters in Adam, dynamic loss scaling through the RAII context.
  const GradientMap params16 = InitialParameters(DataType::Float16);
  Adam adam16(params16, options);
  // Start at the maximum scale so the run must back off through real FP16 overflows.
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 16777216.0f, .GrowthInterval = 50});
  int skipped = 0;
  for (int step = 0; step < kSteps; ++step) {
    const Pass forward = ForwardBackward(params16, problem, Rounding{true}, 1.0f, DataType::Float16);
    GradScalerContext ctx(scaler, Scalar(static_cast<float>(forward.loss)));
    // Backward from the scaled loss: its seed gradient is the factor the loss was multiplied by.
    const float seed = scaler.GetScaleTensor()->ToFloatVector()[0];
    BOOST_REQUIRE(ctx.ScaledLoss()->ToFloatVector()[0] == static_cast<float>(forward.loss) * seed);
    adam16.SetGradients(ForwardBackward(params16, problem, Rounding{true}, seed, DataType::Float16).grads);
    if (!ctx.Step(adam16)) {
      ++skipped;
    }
  }
  const double loss16 = EvaluateFp32(params16, problem);

  const double loss_master = EvaluateFp32(adam16.MasterWeights(), problem);
  BOOST_TEST_MESSAGE("master " << loss_master);
  BOOST_TEST_MESSAGE("initial loss " << initial_loss << ", FP32 " << loss32 << ", FP16+AMP " << loss16 << ", skipped "
                                     << skipped << ", final scale " << scaler.CurrentScale());
  BOOST_TEST(params16.at("W1")->GetDataType() == DataType::Float16);
  BOOST_TEST(adam16.MasterWeights().at("W1")->GetDataType() == DataType::Float32);
  BOOST_TEST(skipped >= 1);  // overflows really happened and were skipped
  BOOST_TEST(skipped == scaler.GetStats()->SkippedSteps);
  BOOST_TEST(adam16.StepCount() == kSteps - skipped);
  BOOST_TEST(loss32 < 0.2 * initial_loss);  // the reference really trained
  BOOST_TEST(std::abs(loss16 - loss32) <= 0.01 * loss32);
}

BOOST_AUTO_TEST_SUITE_END()
