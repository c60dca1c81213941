// Reference Adam/AdamW: PyTorch's update, FP32 masters and moments, state save/restore.
#include <cmath>
#include <cstddef>

#include <boost/test/unit_test.hpp>

#include <mlframework/mlframework.hpp>

#include "optimizers/OptimizerTestUtil.hpp"

using namespace mlframework;
using mlframework::optimizers::Adam;
using mlframework::optimizers::AdamOptions;
using namespace mlfw_test;

namespace {

// PyTorch's Adam/AdamW written out in double.
std::vector<double> ReferenceAdam(std::vector<double> w, const std::vector<std::vector<double>>& grads,
                                  const AdamOptions& o) {
  std::vector<double> m(w.size()), v(w.size());
  const double lr = o.LearningRate, b1 = o.Beta1, b2 = o.Beta2, eps = o.Epsilon, wd = o.WeightDecay;
  int t = 0;
  for (const auto& g : grads) {
    ++t;
    for (std::size_t i = 0; i < w.size(); ++i) {
      double d = g[i];
      if (o.DecoupledWeightDecay) {
        w[i] *= 1.0 - lr * wd;
      } else {
        d += wd * w[i];
      }
      m[i] = b1 * m[i] + (1 - b1) * d;
      v[i] = b2 * v[i] + (1 - b2) * d * d;
      const double mhat = m[i] / (1 - std::pow(b1, t));
      const double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, t)) + eps;
      w[i] -= lr * mhat / denom * (1 - std::pow(b1, t)) / (1 - std::pow(b1, t));
    }
  }
  return w;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(AdamTests)

BOOST_AUTO_TEST_CASE(AdamAndAdamWFollowPyTorch) {
  const std::vector<std::vector<double>> grads{{0.1, -0.2, 0.3}, {0.05, 0.4, -0.1}, {-0.3, 0.1, 0.2}, {1.0, 0.0, -2.0}};
  for (const AdamOptions& o :
       {AdamOptions{.LearningRate = 0.01f}, AdamOptions{.LearningRate = 0.01f, .WeightDecay = 0.1f},
        AdamOptions::AdamW(0.01f, 0.1f), AdamOptions{.Beta1 = 0.5f, .Beta2 = 0.9f}}) {
    Adam adam(OneParam({1.0f, -2.0f, 0.5f}, DataType::Float32), o);
    for (const auto& g : grads) {
      adam.SetGradients(
          OneGrad({static_cast<float>(g[0]), static_cast<float>(g[1]), static_cast<float>(g[2])}, DataType::Float32));
      adam.Step();
    }
    const auto expected = ReferenceAdam({1.0, -2.0, 0.5}, grads, o);
    const auto got = Values(adam.Parameters().at("w"));
    for (std::size_t i = 0; i < got.size(); ++i) {
      BOOST_TEST(got[i] == expected[i], boost::test_tools::tolerance(1e-5));
    }
    BOOST_TEST(adam.StepCount() == 4);
  }
}

BOOST_AUTO_TEST_CASE(FirstStepMovesEachWeightByTheLearningRate) {
  // Adam's first step is lr * sign(g) (up to epsilon), whatever the gradient's magnitude.
  const auto params = OneParam({0.0f, 0.0f, 0.0f}, DataType::Float32);
  Adam adam(params, AdamOptions{.LearningRate = 0.125f});
  adam.SetGradients(OneGrad({1e-3f, -50.0f, 7.0f}, DataType::Float32));
  adam.Step();
  const auto w = Values(params.at("w"));
  BOOST_TEST(w[0] == -0.125f, boost::test_tools::tolerance(1e-4f));
  BOOST_TEST(w[1] == 0.125f, boost::test_tools::tolerance(1e-4f));
  BOOST_TEST(w[2] == -0.125f, boost::test_tools::tolerance(1e-4f));
}

BOOST_AUTO_TEST_CASE(LowPrecisionParametersKeepAnFp32MasterAndGetRoundedValues) {
  for (const DataType dtype : {DataType::Float16, DataType::BFloat16}) {
    const auto params = OneParam({1.0f, -1.0f, 3.0f}, dtype);
    Adam adam(params, AdamOptions{.LearningRate = 1e-4f});
    BOOST_TEST(adam.MasterWeights().at("w")->GetDataType() == DataType::Float32);
    for (int i = 0; i < 5; ++i) {
      adam.SetGradients(OneGrad({1.0f, -1.0f, 0.5f}, dtype));
      adam.Step();
    }
    const auto master = Values(adam.MasterWeights().at("w"));
    BOOST_TEST(master[0] == 1.0f - 5e-4f, boost::test_tools::tolerance(1e-5f));
    BOOST_TEST(master[1] == -1.0f + 5e-4f, boost::test_tools::tolerance(1e-5f));
    const auto param = Values(params.at("w"));
    for (std::size_t i = 0; i < param.size(); ++i) {
      BOOST_TEST(param[i] == RoundTo(master[i], dtype));
    }
  }
}

BOOST_AUTO_TEST_CASE(InvalidOptionsAreRejected) {
  const auto params = OneParam({1.0f}, DataType::Float32);
  auto names = [&](AdamOptions o) -> std::string {
    try {
      Adam adam(params, o);
    } catch (const ArgumentError& e) {
      return e.Parameter();
    }
    return "";
  };
  BOOST_TEST(names({.LearningRate = -1.0f}) == "LearningRate");
  BOOST_TEST(names({.LearningRate = INFINITY}) == "LearningRate");
  BOOST_TEST(names({.Beta1 = 1.0f}) == "Beta1");
  BOOST_TEST(names({.Beta2 = -0.5f}) == "Beta2");
  BOOST_TEST(names({.Epsilon = 0.0f}) == "Epsilon");
  BOOST_TEST(names({.WeightDecay = NAN}) == "WeightDecay");
  BOOST_TEST(names({}) == "");
  Adam adam(params);
  BOOST_CHECK_THROW(adam.Step(), InvalidOperationError);
  BOOST_CHECK_THROW(adam.SetLearningRate(0.0f), ArgumentError);
  adam.SetLearningRate(0.5f);
  BOOST_TEST(adam.Options().LearningRate == 0.5f);
}

BOOST_AUTO_TEST_CASE(StateDictResumesTheSameTrajectory) {
  auto grad = [](int step) {
    return GradientMap{{"a", FromVector({0.1f * static_cast<float>(step), -0.3f}, {2}, DataType::BFloat16)},
                       {"b", FromVector({0.2f, -0.01f * static_cast<float>(step), 0.7f}, {3}, DataType::Float32)}};
  };
  auto make_params = [] {
    return GradientMap{{"a", FromVector({0.5f, -0.5f}, {2}, DataType::BFloat16)},
                       {"b", FromVector({1.0f, 2.0f, 3.0f}, {3}, DataType::Float32)}};
  };
  const auto params_a = make_params();
  Adam a(params_a, AdamOptions::AdamW(0.01f, 0.05f));
  std::vector<std::byte> saved;
  for (int step = 0; step < 8; ++step) {
    if (step == 4) {
      saved = a.StateDict();
    }
    a.SetGradients(grad(step));
    a.Step();
  }
  const auto params_b = make_params();
  Adam b(params_b);
  b.LoadStateDict(saved);
  BOOST_TEST(b.StepCount() == 4);
  BOOST_TEST(b.Options().DecoupledWeightDecay);
  for (int step = 4; step < 8; ++step) {
    b.SetGradients(grad(step));
    b.Step();
  }
  for (const char* name : {"a", "b"}) {
    BOOST_TEST(Values(params_b.at(name)) == Values(params_a.at(name)), boost::test_tools::per_element());
  }
  BOOST_TEST((b.StateDict() == a.StateDict()));

  const auto before = b.StateDict();
  auto corrupted = saved;
  corrupted[corrupted.size() - 20] ^= std::byte{1};
  BOOST_CHECK_THROW(b.LoadStateDict(corrupted), ArgumentError);
  BOOST_CHECK_THROW(b.LoadStateDict(std::span<const std::byte>(saved).first(saved.size() - 1)), ArgumentError);
  BOOST_TEST((b.StateDict() == before));
}

// A tied weight passed under two names (an embedding and the output layer sharing one tensor) or
// two parameters over overlapping memory would be updated twice a step, and one gradient tensor
// given for two parameters unscaled twice by a scaler: both optimizers refuse them, naming both
// entries, as torch.optim refuses a parameter in two groups. Nothing changes on a refused call.
BOOST_AUTO_TEST_CASE(TiedParametersAndSharedGradientsAreRefused) {
  const TensorPtr tied = FromVector({1.0f, 2.0f, 3.0f, 4.0f}, {4});
  const auto message_of = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const ArgumentError& e) {
      return e.what();
    }
    return "";
  };
  const std::string same = message_of([&] { Adam adam({{"embed", tied}, {"head", tied}}); });
  BOOST_TEST(same.find("parameters[\"head\"]") != std::string::npos, same);
  BOOST_TEST(same.find("parameters[\"embed\"]") != std::string::npos, same);
  BOOST_TEST(!message_of([&] { optimizers::SGD sgd({{"embed", tied}, {"head", tied}}); }).empty());
  // Views of overlapping host memory, and one that only touches its neighbour's end.
  std::vector<float> storage(8, 1.0f);
  const auto view = [&](std::size_t first, std::size_t count) {
    return backends::cpu::Wrap(storage.data() + first, {count}, DataType::Float32, nullptr);
  };
  BOOST_TEST(!message_of([&] { Adam adam({{"a", view(0, 5)}, {"b", view(4, 4)}}); }).empty());
  Adam adjacent({{"a", view(0, 4)}, {"b", view(4, 4)}});
  // One gradient tensor for two parameters: refused, the gradients set before kept.
  const TensorPtr g = FromVector({0.5f, 0.5f, 0.5f, 0.5f}, {4});
  adjacent.SetGradients({{"a", g}, {"b", FromVector({0.5f, 0.5f, 0.5f, 0.5f}, {4})}});
  const GradientMap before = adjacent.GetGradients();
  const std::string shared = message_of([&] { adjacent.SetGradients({{"a", g}, {"b", g}}); });
  BOOST_TEST(shared.find("gradients[\"b\"]") != std::string::npos, shared);
  BOOST_TEST(adjacent.GetGradients().at("a") == before.at("a"));
  BOOST_TEST(adjacent.GetGradients().at("b") == before.at("b"));
  // The tied weight passed once steps as one parameter.
  Adam once({{"embed", tied}});
  once.SetGradients({{"embed", g}});
  once.Step();
  BOOST_TEST(tied->ToFloatVector()[0] < 1.0f);
}

BOOST_AUTO_TEST_SUITE_END()
