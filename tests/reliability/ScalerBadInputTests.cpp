// Bad input to the scaler front-ends: null tensors and null scalers, empty
// maps, NaN/Inf/zero/negative configuration values, corrupted and foreign
// state blobs, calls in the wrong order. Each gets the documented exception
// type naming the parameter and leaves the object's StateDict unchanged.
#include <cfloat>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/amp/GradScaler.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>
#include <mlframework/optimizers/mixed_precision/PrecisionManager.hpp>

#include "NonFinite.hpp"
#include "mlframework/core/StateBlob.hpp"
#include "reliability/BadInputSupport.hpp"

using namespace mlframework;
using mlframework::testing::ExpectError;
using mlfw_test::kInf;
using mlfw_test::kNaN;
namespace mp = mlframework::optimizers::mixed_precision;
namespace fsdp = mlframework::distributed::fsdp;

namespace {

const std::vector<float> kBadScales = {kNaN, kInf, -kInf, 0.0f, -0.0f, -1.0f, -FLT_MAX};

// Runs @p call on @p object, which must throw Expected naming @p parameter and keep its StateDict.
template <typename Expected, typename Object>
void ExpectUnchanged(Object& object, const std::function<void()>& call, const std::string& parameter) {
  const std::vector<std::byte> before = object.StateDict();
  ExpectError<Expected>(call, parameter);
  BOOST_TEST((object.StateDict() == before), "a failed call changed the state (parameter " << parameter << ")");
}

// Every damaged form of @p good that a scaler must refuse: each truncation, each single
// bit flip (only a stride of them, to stay fast), and blobs of the other front-ends.
template <typename Object>
void ExpectBlobsRejected(Object& object, const std::vector<std::byte>& good,
                         const std::vector<std::vector<std::byte>>& foreign) {
  for (std::size_t length = 0; length < good.size(); length += 3) {
    const std::vector<std::byte> truncated(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(length));
    ExpectUnchanged<ArgumentError>(
        object, [&] { object.LoadStateDict(truncated); }, "state");
  }
  for (std::size_t bit = 0; bit < good.size() * 8; bit += 5) {
    std::vector<std::byte> flipped = good;
    flipped[bit / 8] ^= static_cast<std::byte>(1U << (bit % 8));
    ExpectUnchanged<ArgumentError>(
        object, [&] { object.LoadStateDict(flipped); }, "state");
  }
  for (const auto& blob : foreign) {
    ExpectUnchanged<ArgumentError>(
        object, [&] { object.LoadStateDict(blob); }, "state");
  }
}

// A well-formed blob of @p kind whose counters sit at INT64_MAX: the next update would
// overflow a signed counter (undefined behaviour) if it were accepted.
std::vector<std::byte> HugeCounterBlob(const char* kind, bool amp_layout, bool mixed_flag) {
  detail::BlobWriter writer(kind, 1);
  if (amp_layout) {
    writer.F32(65536.0f);
    writer.F32(2.0f);
    writer.F32(0.5f);
    writer.I64(2000);
    writer.F32(1.0f);
    writer.F32(16777216.0f);
    writer.I64(1);
    writer.U8(1);
  }
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  writer.ScaleStateFields(amp::ScaleState{.Scale = 2.0f,
                                          .StepsSinceLastOverflow = huge,
                                          .ConsecutiveOverflows = 0,
                                          .TotalOverflows = 0,
                                          .TotalSteps = huge});
  if (mixed_flag) {
    writer.U8(0);
  }
  return writer.Finish();
}

GradientMap Gradients() {
  return {{"a", FromVector({1.0f, 2.0f}, {2}, DataType::Float16)}, {"b", FromVector({3.0f}, {1})}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ScalerBadInput)

BOOST_AUTO_TEST_CASE(AmpDynamicLossScalerRejectsBadConfigurations) {
  using Config = amp::DynamicScalerConfig;
  for (const float bad : kBadScales) {
    ExpectError<ArgumentError>([&] { amp::DynamicLossScaler(Config{.InitialScale = bad}); }, "InitialScale");
    ExpectError<ArgumentError>([&] { amp::DynamicLossScaler(Config{.MinScale = bad}); }, "MinScale");
    ExpectError<ArgumentError>([&] { amp::DynamicLossScaler(Config{.MaxScale = bad}); }, "MaxScale");
    ExpectError<ArgumentError>([&] { amp::DynamicLossScaler(Config{.GrowthFactor = bad}); }, "GrowthFactor");
    ExpectError<ArgumentError>([&] { amp::DynamicLossScaler(Config{.BackoffFactor = bad}); }, "BackoffFactor");
  }
  for (const float bad : {1.0f, 0.5f}) {
    ExpectError<ArgumentError>([&] { amp::DynamicLossScaler(Config{.GrowthFactor = bad}); }, "GrowthFactor");
  }
  for (const float bad : {1.0f, 1.5f}) {
    ExpectError<ArgumentError>([&] { amp::DynamicLossScaler(Config{.BackoffFactor = bad}); }, "BackoffFactor");
  }
  for (const int bad : {0, -1, std::numeric_limits<int>::min()}) {
    ExpectError<ArgumentError>([&] { amp::DynamicLossScaler(Config{.GrowthInterval = bad}); }, "GrowthInterval");
    ExpectError<ArgumentError>([&] { amp::DynamicLossScaler(Config{.Hysteresis = bad}); }, "Hysteresis");
  }
  ExpectError<ArgumentError>([] { amp::DynamicLossScaler(Config{.MinScale = 4.0f, .MaxScale = 2.0f}); }, "MinScale");
  ExpectError<ArgumentError>([] { amp::DynamicLossScaler(Config{.InitialScale = 0.5f}); }, "InitialScale");
  ExpectError<ArgumentError>([] { amp::DynamicLossScaler(Config{.InitialScale = 1e30f}); }, "InitialScale");
}

BOOST_AUTO_TEST_CASE(AmpDynamicLossScalerRejectsNullsAndBadBlobsUnchanged) {
  amp::DynamicLossScaler scaler({.InitialScale = 1024.0f, .GrowthInterval = 3, .Hysteresis = 2});
  scaler.UpdateScale(true);  // a non-initial state, so "unchanged" means something
  scaler.UpdateScale(false);
  ExpectUnchanged<ArgumentNullError>(
      scaler, [&] { (void)scaler.ScaleLoss(nullptr); }, "loss");
  GradientMap with_null = Gradients();
  with_null["c"] = nullptr;
  ExpectUnchanged<ArgumentNullError>(
      scaler, [&] { (void)scaler.UnscaleGradients(with_null); }, "c");
  ExpectUnchanged<ArgumentNullError>(
      scaler, [&] { (void)scaler.CheckOverflow(with_null); }, "c");
  ExpectUnchanged<ArgumentNullError>(
      scaler, [&] { (void)scaler.UnscaleGradientsAndCheck(with_null); }, "c");
  ExpectUnchanged<ArgumentNullError>(
      scaler, [&] { (void)scaler.UnscaleGradient(nullptr); }, "");
  // Empty maps are valid: nothing to unscale, nothing overflowed.
  BOOST_TEST(scaler.UnscaleGradients({}).empty());
  BOOST_TEST(!scaler.CheckOverflow(GradientMap{}));

  mp::DynamicLossScaler mixed;
  fsdp::FSDP instance(distributed::MakeLocalProcessGroup());
  fsdp::FSDPMixedPrecisionManager manager({}, instance);
  ExpectBlobsRejected(scaler, scaler.StateDict(), {mixed.StateDict(), manager.StateDict(), {}});
  ExpectUnchanged<ArgumentError>(
      scaler, [&] { scaler.LoadStateDict(HugeCounterBlob("amp.DynamicLossScaler", true, false)); }, "state");
}

BOOST_AUTO_TEST_CASE(MixedPrecisionScalerRejectsBadOptionsNullsAndBlobs) {
  for (const float bad : kBadScales) {
    for (const auto& [field, set] :
         std::vector<std::pair<std::string, std::function<void(mp::MixedPrecisionOptions&)>>>{
             {"InitialLossScale", [bad](mp::MixedPrecisionOptions& o) { o.InitialLossScale = bad; }},
             {"MinLossScale", [bad](mp::MixedPrecisionOptions& o) { o.MinLossScale = bad; }},
             {"MaxLossScale", [bad](mp::MixedPrecisionOptions& o) { o.MaxLossScale = bad; }},
             {"GrowthFactor", [bad](mp::MixedPrecisionOptions& o) { o.GrowthFactor = bad; }},
             {"BackoffFactor", [bad](mp::MixedPrecisionOptions& o) { o.BackoffFactor = bad; }}}) {
      mp::MixedPrecisionOptions options = mp::MixedPrecisionOptions::ForFP16();
      set(options);
      ExpectError<ArgumentError>([&] { mp::DynamicLossScaler{options}; }, field);
    }
  }
  for (const int bad : {0, -1}) {
    mp::MixedPrecisionOptions options = mp::MixedPrecisionOptions::ForFP16();
    options.GrowthInterval = bad;
    ExpectError<ArgumentError>([&] { mp::DynamicLossScaler{options}; }, "GrowthInterval");
    options = mp::MixedPrecisionOptions::ForFP16();
    options.MaxConsecutiveOverflows = bad;
    ExpectError<ArgumentError>([&] { mp::DynamicLossScaler{options}; }, "MaxConsecutiveOverflows");
  }
  mp::MixedPrecisionOptions bad_dtype = mp::MixedPrecisionOptions::ForFP16();
  bad_dtype.Precision = static_cast<DataType>(9);
  ExpectError<ArgumentError>([&] { mp::DynamicLossScaler{bad_dtype}; }, "Precision");

  mp::DynamicLossScaler scaler;
  (void)scaler.UpdateScale(true);
  ExpectUnchanged<ArgumentNullError>(
      scaler, [&] { (void)scaler.ScaleLoss(nullptr); }, "loss");
  GradientMap with_null = Gradients();
  with_null["c"] = nullptr;
  ExpectUnchanged<ArgumentNullError>(
      scaler, [&] { (void)scaler.UnscaleGradients(with_null); }, "c");
  ExpectUnchanged<ArgumentNullError>(
      scaler, [&] { (void)scaler.CheckOverflow(with_null); }, "c");
  ExpectUnchanged<ArgumentNullError>(
      scaler, [&] { (void)scaler.CheckOverflowAndUpdate(with_null); }, "c");
  BOOST_TEST(!scaler.CheckOverflow(GradientMap{}));

  amp::DynamicLossScaler amp_scaler;
  fsdp::FSDP instance(distributed::MakeLocalProcessGroup());
  fsdp::FSDPMixedPrecisionManager manager({}, instance);
  ExpectBlobsRejected(scaler, scaler.StateDict(), {amp_scaler.StateDict(), manager.StateDict(), {}});
  ExpectUnchanged<ArgumentError>(
      scaler,
      [&] { scaler.LoadStateDict(HugeCounterBlob("optimizers.mixed_precision.DynamicLossScaler", false, true)); },
      "state");
}

BOOST_AUTO_TEST_CASE(FsdpManagerRejectsBadConfigsNullsAndBlobs) {
  fsdp::FSDP instance(distributed::MakeLocalProcessGroup());
  for (const float bad : kBadScales) {
    for (const auto& [field, set] :
         std::vector<std::pair<std::string, std::function<void(fsdp::FSDPMixedPrecisionConfig&)>>>{
             {"InitialLossScale", [bad](fsdp::FSDPMixedPrecisionConfig& c) { c.InitialLossScale = bad; }},
             {"MinLossScale", [bad](fsdp::FSDPMixedPrecisionConfig& c) { c.MinLossScale = bad; }},
             {"MaxLossScale", [bad](fsdp::FSDPMixedPrecisionConfig& c) { c.MaxLossScale = bad; }},
             {"LossScaleGrowthFactor", [bad](fsdp::FSDPMixedPrecisionConfig& c) { c.LossScaleGrowthFactor = bad; }},
             {"LossScaleBackoffFactor",
              [bad](fsdp::FSDPMixedPrecisionConfig& c) { c.LossScaleBackoffFactor = bad; }}}) {
      fsdp::FSDPMixedPrecisionConfig config;
      set(config);
      ExpectError<ArgumentError>([&] { fsdp::FSDPMixedPrecisionManager(config, instance); }, field);
    }
  }
  fsdp::FSDPMixedPrecisionConfig zero_steps;
  zero_steps.LossScaleSteps = 0;
  ExpectError<ArgumentError>([&] { fsdp::FSDPMixedPrecisionManager(zero_steps, instance); }, "LossScaleSteps");
  fsdp::FSDPMixedPrecisionConfig fp32_forward;
  fp32_forward.ForwardDType = DataType::Float32;
  ExpectError<ArgumentError>([&] { fsdp::FSDPMixedPrecisionManager(fp32_forward, instance); }, "ForwardDType");

  fsdp::FSDPMixedPrecisionManager manager({}, instance);
  (void)manager.CheckOverflow(GradientMap{{"w", FromVector({kInf}, {1}, DataType::Float16)}});
  ExpectUnchanged<ArgumentNullError>(
      manager, [&] { (void)manager.ScaleLoss(nullptr); }, "loss");
  ExpectUnchanged<ArgumentNullError>(
      manager, [&] { (void)manager.ConvertToMixedPrecision(nullptr); }, "gatheredParam");
  ExpectUnchanged<ArgumentNullError>(
      manager, [&] { (void)manager.ConvertGradientToFP32(nullptr); }, "mixedPrecisionGrad");
  amp::DynamicLossScaler amp_scaler;
  mp::DynamicLossScaler mixed;
  ExpectBlobsRejected(manager, manager.StateDict(), {amp_scaler.StateDict(), mixed.StateDict(), {}});
  ExpectUnchanged<ArgumentError>(
      manager,
      [&] { manager.LoadStateDict(HugeCounterBlob("distributed.fsdp.FSDPMixedPrecisionManager", false, false)); },
      "state");
}

BOOST_AUTO_TEST_CASE(GradScalerRejectsNullsAndCallsInTheWrongOrder) {
  ExpectError<ArgumentNullError>([] { amp::GradScaler(std::shared_ptr<amp::ILossScaler>{}); }, "scaler");
  for (const float bad : kBadScales) {
    ExpectError<ArgumentError>([&] { (void)amp::GradScaler::Static(bad); }, "");
  }
  amp::GradScaler scaler(amp::DynamicScalerConfig{.InitialScale = 256.0f, .GrowthInterval = 2});
  ExpectUnchanged<ArgumentNullError>(
      scaler, [&] { (void)scaler.Scale(nullptr); }, "loss");
  ExpectUnchanged<InvalidOperationError>(
      scaler, [&] { scaler.Update(); }, "");  // no overflow check recorded
  (void)scaler.Scale(Scalar(1.0f));
  (void)scaler.Unscale(Gradients());
  ExpectUnchanged<InvalidOperationError>(
      scaler, [&] { (void)scaler.Unscale(Gradients()); }, "");  // twice
  ExpectUnchanged<InvalidOperationError>(
      scaler, [&] { scaler.Disable(); }, "");  // mid-iteration
  ExpectUnchanged<InvalidOperationError>(
      scaler, [&] { scaler.Enable(); }, "");
  scaler.Update();
  ExpectUnchanged<InvalidOperationError>(
      scaler, [&] { scaler.Update(); }, "");  // iteration already ended
  ExpectBlobsRejected(scaler, scaler.StateDict(), {amp::DynamicLossScaler().StateDict(), {}});
  BOOST_TEST_MESSAGE("ScalerBadInput: " << mlframework::testing::BadInputCount() << " bad-input cases so far");
}

BOOST_AUTO_TEST_CASE(GradientPipelineAndPrecisionManagerRejectNullsAndBlobs) {
  mp::GradientConversionLayer layer;
  (void)layer.ProcessGradients(Gradients());  // a non-initial state
  GradientMap with_null = Gradients();
  with_null["c"] = nullptr;
  ExpectUnchanged<ArgumentNullError>(
      layer, [&] { (void)layer.ProcessGradients(with_null); }, "c");
  ExpectUnchanged<ArgumentNullError>(
      layer, [&] { (void)layer.ClipGradients(with_null); }, "c");
  ExpectUnchanged<ArgumentNullError>(
      layer, [&] { (void)layer.ScaleLoss(nullptr); }, "loss");
  mp::PrecisionManager precision;
  ExpectBlobsRejected(layer, layer.StateDict(), {precision.StateDict(), mp::DynamicLossScaler().StateDict(), {}});

  ExpectUnchanged<ArgumentNullError>(
      precision, [&] { (void)precision.ConvertToFP32(with_null); }, "c");
  ExpectUnchanged<ArgumentNullError>(
      precision, [&] { (void)precision.ConvertToTargetPrecision(with_null); }, "c");
  ExpectUnchanged<ArgumentNullError>(
      precision, [&] { precision.InitializeMasterWeights(with_null); }, "c");
  ExpectBlobsRejected(precision, precision.StateDict(), {layer.StateDict(), mp::DynamicLossScaler().StateDict(), {}});
  BOOST_TEST_MESSAGE("ScalerBadInput: " << mlframework::testing::BadInputCount() << " bad-input cases so far");
}

BOOST_AUTO_TEST_CASE(GradientPipelineRejectsAWellFramedBlobWithANegativeNorm) {
  // Sealed with a valid checksum, so only the value check can refuse it. A NaN norm is not
  // refused: StateDict() writes one after an unchecked NaN gradient was measured.
  mp::GradientConversionLayer layer;
  (void)layer.ProcessGradients(Gradients());
  const std::vector<std::byte> scaler = layer.LossScaler()->StateDict();
  const std::vector<std::byte> manager = layer.Precision()->StateDict();
  for (const float bad : {-1.0f, -kInf}) {
    detail::BlobWriter writer("optimizers.mixed_precision.GradientConversionLayer", 1);
    writer.I64(0);
    writer.F32(bad);
    writer.U64(scaler.size());
    writer.Bytes(scaler);
    writer.U64(manager.size());
    writer.Bytes(manager);
    const std::vector<std::byte> blob = writer.Finish();
    ExpectUnchanged<ArgumentError>(
        layer, [&] { layer.LoadStateDict(blob); }, "state");
  }
}

BOOST_AUTO_TEST_CASE(PrecisionManagerFallbackEntryPointsRejectBadInput) {
  // FP32Parameters: null entries, and with master weights names and shapes that are not theirs.
  mp::PrecisionManager precision;
  GradientMap with_null = Gradients();
  with_null["c"] = nullptr;
  ExpectUnchanged<ArgumentNullError>(
      precision, [&] { (void)precision.FP32Parameters(with_null); }, "c");
  precision.InitializeMasterWeights(Gradients());
  ExpectUnchanged<ArgumentNullError>(
      precision, [&] { (void)precision.FP32Parameters(with_null); }, "c");
  ExpectUnchanged<ArgumentError>(
      precision,
      [&] {
        (void)precision.FP32Parameters({{"a", FromVector({1.0f, 2.0f}, {2})}});
      },
      "model_parameters");
  ExpectUnchanged<ArgumentError>(
      precision,
      [&] {
        (void)precision.FP32Parameters({{"a", FromVector({1.0f, 2.0f}, {2})}, {"x", FromVector({3.0f}, {1})}});
      },
      "model_parameters");
  ExpectUnchanged<ArgumentError>(
      precision,
      [&] {
        (void)precision.FP32Parameters({{"a", FromVector({1.0f}, {1})}, {"b", FromVector({3.0f}, {1})}});
      },
      "model_parameters[\"a\"]");

  // Version 2 blobs that frame correctly but hold an impossible fallback state.
  mp::PrecisionManager manager(mp::MixedPrecisionOptions{.InitialLossScale = 2.0f, .MaxConsecutiveOverflows = 3});
  mp::DynamicLossScaler scaler(manager.Options());
  for (int i = 0; i < 3; ++i) {  // one back-off, two overflows at the minimum: a non-initial count
    scaler.UpdateScale(true);
    (void)manager.CheckFallback(scaler);
  }
  ExpectBlobsRejected(manager, manager.StateDict(),
                      {mp::GradientConversionLayer().StateDict(), scaler.StateDict(), {}});
  const auto blob = [](std::uint8_t fallen_back, std::int64_t step, std::int64_t at_min, std::uint8_t has_seen,
                       std::int64_t run) {
    detail::BlobWriter writer("optimizers.mixed_precision.PrecisionManager", 2);
    writer.U8(static_cast<std::uint8_t>(DataType::Float16));
    writer.U8(fallen_back);
    writer.I64(step);
    writer.I64(at_min);
    writer.U8(has_seen);
    amp::ScaleState seen;
    seen.Scale = 1.0f;
    seen.ConsecutiveOverflows = run;
    seen.TotalOverflows = run;
    seen.TotalSteps = run;
    writer.ScaleStateFields(seen);
    return writer.Finish();
  };
  for (const auto& bad : {blob(2, 0, 0, 1, 3), blob(0, 5, 0, 1, 3), blob(1, -1, 0, 1, 3), blob(0, 0, -1, 1, 3),
                          blob(0, 0, 4, 1, 3), blob(0, 0, 0, 2, 3)}) {
    ExpectUnchanged<ArgumentError>(
        manager, [&] { manager.LoadStateDict(bad); }, "state");
  }
  manager.LoadStateDict(blob(1, 7, 3, 1, 3));  // the same frame with a possible state loads
  BOOST_TEST(manager.FallbackStep() == 7);
  BOOST_TEST_MESSAGE("ScalerBadInput: " << mlframework::testing::BadInputCount() << " bad-input cases in total");
}

BOOST_AUTO_TEST_SUITE_END()
