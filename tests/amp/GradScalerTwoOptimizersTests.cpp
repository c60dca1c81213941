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
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "amp/AmpTestUtil.hpp"

#ifndef MLFW_GRAD_SCALER_TWO_OPTIMIZERS
#error "MLFW_GRAD_SCALER_TWO_OPTIMIZERS must name tests/data/grad_scaler_two_optimizers.txt"
#endif

using namespace mlframework;
using mlframework::amp::DynamicScalerConfig;
using mlframework::amp::GradScaler;
using mlframework::amp::GradScalerContext;
using mlframework::optimizers::SGD;
using mlframework::optimizers::SGDOptions;

namespace {

using Bits = std::vector<std::uint32_t>;
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
      BOOST_TEST(std::bit_cast<std::uint32_t>(scaler.Scale()) == step.scale_before);
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
            stepped[i] = scaler.Step(opt, false);
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
      BOOST_TEST(std::bit_cast<std::uint32_t>(scaler.Scale()) == step.scale_after);
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

BOOST_AUTO_TEST_CASE(PyTorchSequenceMatchesTorchBitForBit) { Replay(Flow::PyTorch); }

BOOST_AUTO_TEST_CASE(DeferredStepsMatchTorchBitForBit) { Replay(Flow::Deferred); }

BOOST_AUTO_TEST_CASE(ContextWithTwoOptimizersMatchesTorchBitForBit) { Replay(Flow::Context); }

BOOST_AUTO_TEST_SUITE_END()
