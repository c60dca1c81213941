// Reference SGD: PyTorch's update, FP32 masters for FP16/BF16 parameters, state save/restore.
#include <cmath>
#include <cstddef>

#include <boost/test/unit_test.hpp>

#include <mlframework/mlframework.hpp>

#include "optimizers/OptimizerTestUtil.hpp"

using namespace mlframework;
using mlframework::optimizers::SGD;
using mlframework::optimizers::SGDOptions;
using namespace mlfw_test;

namespace {

// PyTorch's SGD written out in double, one parameter, fixed gradients per step.
std::vector<double> ReferenceSGD(std::vector<double> w, const std::vector<std::vector<double>>& grads, double lr,
                                 double mu, double wd, bool nesterov) {
  std::vector<double> buf(w.size());
  bool first = true;
  for (const auto& g : grads) {
    for (std::size_t i = 0; i < w.size(); ++i) {
      const double d = g[i] + wd * w[i];
      double step = d;
      if (mu != 0.0) {
        buf[i] = first ? d : mu * buf[i] + d;
        step = nesterov ? d + mu * buf[i] : buf[i];
      }
      w[i] -= lr * step;
    }
    first = false;
  }
  return w;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(SGDTests)

BOOST_AUTO_TEST_CASE(PlainMomentumNesterovAndWeightDecayFollowPyTorch) {
  const std::vector<float> w0{1.0f, -2.0f, 0.5f};
  const std::vector<std::vector<double>> grads{{0.1, -0.2, 0.3}, {0.05, 0.4, -0.1}, {-0.3, 0.1, 0.2}};
  struct Case {
    float mu, wd;
    bool nesterov;
  };
  for (const Case c :
       {Case{0.0f, 0.0f, false}, Case{0.9f, 0.0f, false}, Case{0.9f, 0.01f, true}, Case{0.0f, 0.1f, false}}) {
    SGD sgd(OneParam(w0, DataType::Float32),
            SGDOptions{.LearningRate = 0.1f, .Momentum = c.mu, .WeightDecay = c.wd, .Nesterov = c.nesterov});
    for (const auto& g : grads) {
      sgd.SetGradients(
          OneGrad({static_cast<float>(g[0]), static_cast<float>(g[1]), static_cast<float>(g[2])}, DataType::Float32));
      sgd.Step();
    }
    const auto expected = ReferenceSGD({1.0, -2.0, 0.5}, grads, 0.1, c.mu, c.wd, c.nesterov);
    const auto got = Values(sgd.Parameters().at("w"));
    for (std::size_t i = 0; i < got.size(); ++i) {
      BOOST_TEST(got[i] == expected[i], boost::test_tools::tolerance(1e-5));
    }
    BOOST_TEST(sgd.StepCount() == 3);
  }
}

BOOST_AUTO_TEST_CASE(Fp32ParametersAreUpdatedInPlace) {
  const auto params = OneParam({1.0f, 2.0f}, DataType::Float32);
  SGD sgd(params, SGDOptions{.LearningRate = 0.5f});
  BOOST_TEST(sgd.MasterWeights().at("w") == params.at("w"));  // no copy
  sgd.SetGradients(OneGrad({1.0f, 1.0f}, DataType::Float32));
  sgd.Step();
  BOOST_TEST(Values(params.at("w")) == (std::vector<float>{0.5f, 1.5f}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(Fp32ParametersInHostMemoryOfAnyTensorTypeAreUpdatedInPlace) {
  // A framework's own FP32 tensor over host memory is its own master too; one that keeps its
  // elements out of the host's reach gets an FP32 master and the rounded values written back.
  for (const bool host_memory : {true, false}) {
    BOOST_TEST_CONTEXT("host memory " << host_memory) {
      const auto inner = FromVector({1.0f, 2.0f}, {2});
      const GradientMap params{{"w", std::make_shared<ForeignTensor>(inner, host_memory)}};
      SGD sgd(params, SGDOptions{.LearningRate = 0.5f});
      BOOST_TEST((sgd.MasterWeights().at("w") == params.at("w")) == host_memory);
      sgd.SetGradients({{"w", std::make_shared<ForeignTensor>(FromVector({1.0f, -1.0f}, {2}), host_memory)}});
      sgd.Step();
      BOOST_TEST(Values(inner) == (std::vector<float>{0.5f, 2.5f}), boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(LowPrecisionParametersKeepAnFp32MasterAndGetRoundedValues) {
  for (const DataType dtype : {DataType::Float16, DataType::BFloat16}) {
    const auto params = OneParam({1.0f, -1.0f}, dtype);
    SGD sgd(params, SGDOptions{.LearningRate = 1e-4f});
    BOOST_TEST(sgd.MasterWeights().at("w") != params.at("w"));
    BOOST_TEST(sgd.MasterWeights().at("w")->GetDataType() == DataType::Float32);
    // Updates smaller than half an FP16/BF16 ulp vanish in the parameter but accumulate in the master.
    for (int i = 0; i < 10; ++i) {
      sgd.SetGradients(OneGrad({1.0f, -1.0f}, dtype));
      sgd.Step();
    }
    const auto master = Values(sgd.MasterWeights().at("w"));
    BOOST_TEST(master[0] == 0.999f, boost::test_tools::tolerance(1e-5f));
    BOOST_TEST(master[1] == -0.999f, boost::test_tools::tolerance(1e-5f));
    const auto param = Values(params.at("w"));
    BOOST_TEST(param[0] == RoundTo(master[0], dtype));
    BOOST_TEST(param[1] == RoundTo(master[1], dtype));
  }
}

BOOST_AUTO_TEST_CASE(GradientsOfAnyDtypeAreReadInFp32) {
  for (const DataType gdtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
    const auto params = OneParam({0.0f, 0.0f}, DataType::Float32);
    SGD sgd(params, SGDOptions{.LearningRate = 1.0f});
    sgd.SetGradients(OneGrad({0.25f, -3.0f}, gdtype));
    BOOST_TEST(sgd.GetGradients().at("w")->GetDataType() == gdtype);
    sgd.Step();
    BOOST_TEST(Values(params.at("w")) == (std::vector<float>{-0.25f, 3.0f}), boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(InvalidOptionsAndParametersAreRejected) {
  const auto params = OneParam({1.0f}, DataType::Float32);
  auto names = [&](SGDOptions o) -> std::string {
    try {
      SGD sgd(params, o);
    } catch (const ArgumentError& e) {
      return e.Parameter();
    }
    return "";
  };
  BOOST_TEST(names({.LearningRate = 0.0f}) == "LearningRate");
  BOOST_TEST(names({.LearningRate = NAN}) == "LearningRate");
  BOOST_TEST(names({.Momentum = 1.0f}) == "Momentum");
  BOOST_TEST(names({.Momentum = -0.1f}) == "Momentum");
  BOOST_TEST(names({.WeightDecay = -1.0f}) == "WeightDecay");
  BOOST_TEST(names({.Nesterov = true}) == "Nesterov");
  BOOST_TEST(names({.Momentum = 0.9, .Dampening = 1.5}) == "Dampening");
  BOOST_TEST(names({.Momentum = 0.9, .Dampening = -0.1}) == "Dampening");
  BOOST_TEST(names({.Momentum = 0.9, .Dampening = NAN}) == "Dampening");
  // PyTorch's rule: Nesterov momentum takes no dampening.
  BOOST_TEST(names({.Momentum = 0.9, .Dampening = 0.1, .Nesterov = true}) == "Nesterov");
  BOOST_TEST(names({.Momentum = 0.9, .Dampening = 1.0}) == "");
  BOOST_CHECK_THROW(SGD(GradientMap{}), ArgumentError);
  BOOST_CHECK_THROW(SGD(GradientMap{{"w", nullptr}}), ArgumentNullError);
  SGD sgd(params);
  BOOST_CHECK_THROW(sgd.SetLearningRate(-1.0f), ArgumentError);
  BOOST_TEST(sgd.Options().LearningRate == 0.01);  // the default, a double as torch holds it
}

BOOST_AUTO_TEST_CASE(MisuseLeavesTheOptimizerUnchanged) {
  const auto params = OneParam({1.0f, 2.0f}, DataType::Float32);
  SGD sgd(params, SGDOptions{.LearningRate = 0.1f, .Momentum = 0.5f});
  BOOST_CHECK_THROW(sgd.Step(), InvalidOperationError);
  const auto good = OneGrad({1.0f, 1.0f}, DataType::Float32);
  sgd.SetGradients(good);
  const auto before = sgd.StateDict();
  BOOST_CHECK_THROW(sgd.SetGradients({{"w", FromVector({1.0f}, {1})}}), ArgumentError);
  BOOST_CHECK_THROW(sgd.SetGradients({{"v", FromVector({1.0f, 1.0f}, {2})}}), ArgumentError);
  BOOST_CHECK_THROW(sgd.SetGradients({}), ArgumentError);
  BOOST_CHECK_THROW(sgd.SetGradients({{"w", nullptr}}), ArgumentNullError);
  BOOST_TEST(sgd.GetGradients().at("w") == good.at("w"));
  BOOST_TEST((sgd.StateDict() == before));
}

BOOST_AUTO_TEST_CASE(StateDictResumesTheSameTrajectory) {
  const std::vector<float> w0{0.3f, -0.7f, 1.1f};
  const SGDOptions options{.LearningRate = 0.05f, .Momentum = 0.9f, .WeightDecay = 0.01f};
  auto grad = [](int step) {
    return OneGrad({0.1f * static_cast<float>(step), -0.2f, 0.05f * static_cast<float>(step % 3)}, DataType::Float16);
  };
  const auto params_a = OneParam(w0, DataType::Float16);
  SGD a(params_a, options);
  std::vector<std::byte> saved;
  for (int step = 0; step < 6; ++step) {
    if (step == 3) {
      saved = a.StateDict();
    }
    a.SetGradients(grad(step));
    a.Step();
  }
  const auto params_b = OneParam({0.0f, 0.0f, 0.0f}, DataType::Float16);
  SGD b(params_b, SGDOptions{.LearningRate = 1.0f});
  b.LoadStateDict(saved);
  BOOST_TEST(b.Options().Momentum == 0.9f);
  BOOST_TEST(b.StepCount() == 3);
  for (int step = 3; step < 6; ++step) {
    b.SetGradients(grad(step));
    b.Step();
  }
  BOOST_TEST(Values(b.MasterWeights().at("w")) == Values(a.MasterWeights().at("w")), boost::test_tools::per_element());
  BOOST_TEST(Values(params_b.at("w")) == Values(params_a.at("w")), boost::test_tools::per_element());
  BOOST_TEST((b.StateDict() == a.StateDict()));
}

BOOST_AUTO_TEST_CASE(CorruptOrMismatchedBlobsAreRejectedWithoutChange) {
  SGD sgd(OneParam({1.0f, 2.0f}, DataType::Float32), SGDOptions{.Momentum = 0.5f});
  sgd.SetGradients(OneGrad({1.0f, 1.0f}, DataType::Float32));
  sgd.Step();
  const auto blob = sgd.StateDict();
  auto truncated = blob;
  truncated.resize(blob.size() / 2);
  auto flipped = blob;
  flipped[blob.size() / 2] ^= std::byte{0x40};
  SGD other(OneParam({1.0f, 2.0f, 3.0f}, DataType::Float32));
  BOOST_CHECK_THROW(other.LoadStateDict(blob), ArgumentError);  // size mismatch
  SGD renamed(GradientMap{{"v", FromVector({1.0f, 2.0f}, {2})}});
  BOOST_CHECK_THROW(renamed.LoadStateDict(blob), ArgumentError);  // name mismatch
  const auto before = sgd.StateDict();
  BOOST_CHECK_THROW(sgd.LoadStateDict(truncated), ArgumentError);
  BOOST_CHECK_THROW(sgd.LoadStateDict(flipped), ArgumentError);
  BOOST_CHECK_THROW(sgd.LoadStateDict({}), ArgumentError);
  BOOST_TEST((sgd.StateDict() == before));
}

BOOST_AUTO_TEST_SUITE_END()
