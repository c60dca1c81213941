// Loss scaling refuses FP8 gradients in every front end (issue 38; README "loss scaling refuses
// FP8": FP8 tensors are scaled per tensor by an fp8 recipe). Each call that takes gradients
// throws ArgumentError naming the FP8 gradient and its dtype, enabled or not, and leaves the
// scaler's state and the other gradients (FP32 ones are unscaled in place) as they were.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/amp/GradScaler.hpp>
#include <mlframework/amp/StaticLossScaler.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>

#include "reliability/BadInputSupport.hpp"

using namespace mlframework;
using mlframework::testing::ExpectError;
using mlframework::testing::Snapshot;
namespace mp = mlframework::optimizers::mixed_precision;
namespace fsdp = mlframework::distributed::fsdp;

namespace {

// An FP16 and an FP32 gradient (scaled by 4, unscaled in place) and the FP8 one, @p dtype.
GradientMap WithFloat8(DataType dtype) {
  return {{"a", FromVector({4.0f, 8.0f}, {2}, DataType::Float16)},
          {"b", FromVector({12.0f, -4.0f}, {2})},
          {"f8", FromVector({1.0f, 2.0f}, {2}, dtype)}};
}

std::vector<TensorPtr> Values(const GradientMap& gradients) {
  std::vector<TensorPtr> list;
  for (const auto& entry : gradients) {
    list.push_back(entry.second);
  }
  return list;
}

// @p call must throw ArgumentError naming @p parameter with the dtype's name in its message, and
// leave @p object's StateDict and every gradient value as they were.
template <typename Object>
void ExpectRefused(Object& object, const GradientMap& gradients, DataType dtype, const std::function<void()>& call,
                   const std::string& parameter = "gradients[\"f8\"]") {
  const std::vector<std::byte> state = object.StateDict();
  const auto values = Snapshot(Values(gradients));
  ExpectError<ArgumentError>(
      [&] {
        try {
          call();
        } catch (const ArgumentError& error) {
          BOOST_TEST(std::string(error.what()).find(ToString(dtype)) != std::string::npos, error.what());
          throw;
        }
      },
      parameter);
  BOOST_TEST((object.StateDict() == state), "the refused call changed the state");
  BOOST_TEST((Snapshot(Values(gradients)) == values), "the refused call changed a gradient");
}

const DataType kFloat8Types[] = {DataType::Float8E4M3FN, DataType::Float8E5M2};

}  // namespace

BOOST_AUTO_TEST_SUITE(Float8GradientBadInput)

BOOST_AUTO_TEST_CASE(StaticLossScalerRefusesFp8Gradients) {
  for (const DataType dtype : kFloat8Types) {
    for (const bool enabled : {true, false}) {
      amp::StaticLossScaler scaler(4.0f, enabled);
      const GradientMap gradients = WithFloat8(dtype);
      const TensorPtr one = gradients.at("f8");
      ExpectRefused(scaler, gradients, dtype, [&] { (void)scaler.UnscaleGradients(gradients); });
      ExpectRefused(scaler, gradients, dtype, [&] { (void)scaler.UnscaleGradientsAndCheck(gradients); });
      ExpectRefused(scaler, gradients, dtype, [&] { (void)scaler.CheckOverflow(gradients); });
      ExpectRefused(
          scaler, gradients, dtype, [&] { (void)scaler.UnscaleGradient(one); }, "gradient");
      ExpectRefused(
          scaler, gradients, dtype, [&] { (void)scaler.CheckOverflow(one); }, "gradient");
    }
  }
}

BOOST_AUTO_TEST_CASE(AmpDynamicLossScalerAndGradScalerRefuseFp8Gradients) {
  for (const DataType dtype : kFloat8Types) {
    amp::DynamicLossScaler scaler({.InitialScale = 4.0f, .GrowthInterval = 2});
    scaler.UpdateScale(false);  // a non-initial state
    const GradientMap gradients = WithFloat8(dtype);
    const TensorPtr one = gradients.at("f8");
    ExpectRefused(scaler, gradients, dtype, [&] { (void)scaler.UnscaleGradients(gradients); });
    ExpectRefused(scaler, gradients, dtype, [&] { (void)scaler.UnscaleGradientsAndCheck(gradients); });
    ExpectRefused(scaler, gradients, dtype, [&] { (void)scaler.UnscaleAndRecordOverflow(gradients); });
    ExpectRefused(scaler, gradients, dtype, [&] { (void)scaler.CheckOverflow(gradients); });
    ExpectRefused(scaler, gradients, dtype, [&] { scaler.RecordOverflow(gradients); });
    ExpectRefused(
        scaler, gradients, dtype, [&] { (void)scaler.UnscaleGradient(one); }, "gradient");
    ExpectRefused(
        scaler, gradients, dtype, [&] { (void)scaler.CheckOverflow(one); }, "gradient");

    // The case: GradScaler::Unscale on FP8 E5M2 gradients (through its scaler).
    amp::GradScaler grad_scaler(amp::DynamicScalerConfig{.InitialScale = 4.0f});
    (void)grad_scaler.Scale(Scalar(1.0f));
    ExpectRefused(grad_scaler, gradients, dtype, [&] { (void)grad_scaler.Unscale(gradients); });
  }
}

BOOST_AUTO_TEST_CASE(MixedPrecisionScalerRefusesFp8Gradients) {
  for (const DataType dtype : kFloat8Types) {
    mp::DynamicLossScaler scaler;
    (void)scaler.UpdateScale(true);
    const GradientMap gradients = WithFloat8(dtype);
    ExpectRefused(scaler, gradients, dtype, [&] { (void)scaler.UnscaleGradients(gradients); });
    ExpectRefused(scaler, gradients, dtype, [&] { (void)scaler.CheckOverflow(gradients); });
    ExpectRefused(scaler, gradients, dtype, [&] { (void)scaler.CheckOverflowAndUpdate(gradients); });
    ExpectRefused(scaler, gradients, dtype, [&] { scaler.RecordOverflow(gradients); });
    const std::vector<TensorPtr> list = Values(gradients);  // a, b, f8
    ExpectRefused(
        scaler, gradients, dtype, [&] { scaler.RecordOverflow(list); }, "tensors[2]");
    const std::vector<TensorPtr> in_place{list[1], list[2]};
    ExpectRefused(
        scaler, gradients, dtype, [&] { scaler.UnscaleAndRecordOverflow(in_place, {}, {}); }, "in_place[1]");
    const std::vector<TensorPtr> src{list[2]};
    const std::vector<TensorPtr> dst{Zeros({2})};
    ExpectRefused(
        scaler, gradients, dtype, [&] { scaler.UnscaleAndRecordOverflow({}, src, dst); }, "src[0]");
  }
}

BOOST_AUTO_TEST_CASE(ConversionLayerAndFsdpManagerRefuseFp8Gradients) {
  for (const DataType dtype : kFloat8Types) {
    mp::GradientConversionLayer layer;
    (void)layer.ProcessGradients({{"a", FromVector({1.0f}, {1}, DataType::Float16)}});  // a non-initial state
    const GradientMap gradients = WithFloat8(dtype);
    ExpectRefused(layer, gradients, dtype, [&] { (void)layer.ProcessGradients(gradients); });

    fsdp::FSDP instance(distributed::MakeLocalProcessGroup());
    fsdp::FSDPMixedPrecisionManager manager({}, instance);
    (void)manager.CheckOverflow({{"a", FromVector({1.0f}, {1}, DataType::Float16)}});
    ExpectRefused(manager, gradients, dtype, [&] { (void)manager.CheckOverflow(gradients); });
    ExpectRefused(manager, gradients, dtype, [&] { (void)manager.UnscaleAndCheckOverflow(gradients); });
  }
}

BOOST_AUTO_TEST_SUITE_END()
