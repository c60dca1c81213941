// GradScaler's amax tracking (headroom telemetry): off by default, the amax of the unscaled
// gradients of each finished iteration while on, the finite values only on an overflowing one,
// the same on the fake device backend as on the host, and no extra synchronisation in a step.
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "NonFinite.hpp"
#include "amp/AmpTestUtil.hpp"
#include "amp/FakeDeviceBackend.hpp"

using namespace mlframework;
using namespace mlframework::amp;
using mlfw_test::FakeTensor;
using mlfw_test::kInf;
using mlfw_test::RecordingOptimizer;
using mlfw_test::SyncsDuring;

namespace {

// Scaled gradients of one step: FP16, BF16 and FP32; @p poison replaces one FP16 element.
GradientMap Scaled(float scale, bool on_device, float poison = 0.0f) {
  const std::vector<float> a = {0.5f * scale, poison == 0.0f ? -3.0f * scale : poison, 2.0f * scale};
  const std::vector<float> b = {-6.0f * scale, 0.25f * scale};
  const std::vector<float> c = {1.0f * scale, -1.5f * scale};
  if (on_device) {
    return {{"a", FakeTensor(a, {3}, DataType::Float16)},
            {"b", FakeTensor(b, {2}, DataType::BFloat16)},
            {"c", FakeTensor(c, {2}, DataType::Float32)}};
  }
  return {{"a", FromVector(a, {3}, DataType::Float16)},
          {"b", FromVector(b, {2}, DataType::BFloat16)},
          {"c", FromVector(c, {2}, DataType::Float32)}};
}

// A user policy with only the six pure members: it cannot track the amax.
class AmaxlessScaler final : public ILossScaler {
 public:
  float CurrentScale() const override { return 2.0f; }
  bool IsEnabled() const override { return true; }
  TensorPtr ScaleLoss(const TensorPtr& loss) override { return loss->Multiply(2.0f); }
  GradientMap UnscaleGradients(const GradientMap& gradients) override { return gradients; }
  bool CheckOverflow(const GradientMap& /*gradients*/) override { return false; }
  void UpdateScale(bool /*overflow*/) override {}
};

// LastAmax(), or -1 when there is none (printable in a failed check).
float AmaxOf(const GradScaler& scaler) { return scaler.LastAmax().value_or(-1.0f); }

}  // namespace

BOOST_AUTO_TEST_SUITE(GradScalerAmax)

BOOST_AUTO_TEST_CASE(OffByDefault) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  BOOST_TEST(!scaler.AmaxTracking());
  RecordingOptimizer optimizer(Scaled(8.0f, false));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(scaler.Step(optimizer));
  BOOST_TEST(!scaler.LastAmax().has_value());
}

BOOST_AUTO_TEST_CASE(TracksEachIterationOnHostAndDevice) {
  for (const bool on_device : {false, true}) {
    BOOST_TEST_CONTEXT("device " << on_device) {
      GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f, .GrowthInterval = 1});
      scaler.SetAmaxTracking(true);
      BOOST_TEST(scaler.AmaxTracking());
      BOOST_TEST(!scaler.LastAmax().has_value());  // before the first iteration
      RecordingOptimizer optimizer(Scaled(8.0f, on_device));
      scaler.Scale(Scalar(1.0f));
      BOOST_TEST(scaler.Step(optimizer));
      BOOST_TEST(AmaxOf(scaler) == 6.0f);  // max |g| / scale

      // The scale grew to 16; an overflowing iteration still reports its finite values' amax.
      optimizer.Load(Scaled(16.0f, on_device, kInf));
      scaler.Scale(Scalar(1.0f));
      BOOST_TEST(!scaler.Step(optimizer));
      BOOST_TEST(AmaxOf(scaler) == 6.0f);

      // The manual flow: Unscale, then Update; a smaller step gives a smaller amax (cleared per iteration).
      const GradientMap small = {
          {"x", on_device ? FakeTensor({0.5f * 8.0f}, {1}, DataType::Float32) : FromVector({0.5f * 8.0f}, {1})}};
      scaler.Scale(Scalar(1.0f));
      scaler.Unscale(small);
      scaler.Update();
      BOOST_TEST(AmaxOf(scaler) == 0.5f);

      scaler.SetAmaxTracking(false);
      BOOST_TEST(!scaler.LastAmax().has_value());
    }
  }
}

// A step on the device reads the amax once, when the iteration finishes (Step() already reads
// the found-inf flag there); tracking off costs nothing.
BOOST_AUTO_TEST_CASE(DeviceStepSynchronisesOnlyToReadIt) {
  GradScaler plain(DynamicScalerConfig{.InitialScale = 8.0f});
  GradScaler tracked(DynamicScalerConfig{.InitialScale = 8.0f});
  tracked.SetAmaxTracking(true);
  RecordingOptimizer a(Scaled(8.0f, true));
  RecordingOptimizer b(Scaled(8.0f, true));
  plain.Scale(FakeTensor({1.0f}, {1}, DataType::Float32));
  tracked.Scale(FakeTensor({1.0f}, {1}, DataType::Float32));
  const auto plain_syncs = SyncsDuring([&] { plain.Step(a); });
  const auto tracked_syncs = SyncsDuring([&] { tracked.Step(b); });
  BOOST_TEST(tracked_syncs == plain_syncs + 1);
  BOOST_TEST(AmaxOf(tracked) == 6.0f);
}

BOOST_AUTO_TEST_CASE(StaticScalerTracksToo) {
  GradScaler scaler = GradScaler::Static(4.0f);
  scaler.SetAmaxTracking(true);
  RecordingOptimizer optimizer(Scaled(4.0f, false));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(scaler.Step(optimizer));
  BOOST_TEST(AmaxOf(scaler) == 6.0f);
  optimizer.Load(Scaled(4.0f, false, kInf));
  scaler.Scale(Scalar(1.0f));
  BOOST_TEST(!scaler.Step(optimizer));
  BOOST_TEST(AmaxOf(scaler) == 6.0f);
}

BOOST_AUTO_TEST_CASE(ResetStartsOverAndCopiesKeepTracking) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  scaler.SetAmaxTracking(true);
  RecordingOptimizer optimizer(Scaled(8.0f, false));
  scaler.Scale(Scalar(1.0f));
  scaler.Step(optimizer);
  BOOST_TEST(scaler.LastAmax().has_value());
  scaler.Reset();
  BOOST_TEST(!scaler.LastAmax().has_value());
  BOOST_TEST(scaler.AmaxTracking());

  StaticLossScaler tracked(4.0f);
  BOOST_TEST(tracked.SetAmaxTracking(true));
  const StaticLossScaler copy(tracked);
  BOOST_TEST(copy.RecordedAmax().has_value());
  BOOST_TEST(!StaticLossScaler(4.0f).RecordedAmax().has_value());
  DynamicLossScaler dynamic(DynamicScalerConfig{});
  BOOST_TEST(dynamic.SetAmaxTracking(true));
  const DynamicLossScaler dynamic_copy(dynamic);
  BOOST_TEST(dynamic_copy.RecordedAmax().has_value());
}

// Tracking is a setting of the scaler, not part of its state: loading a checkpoint keeps it on,
// for the static scaler as for the dynamic one.
BOOST_AUTO_TEST_CASE(LoadingAStateKeepsTracking) {
  for (const bool dynamic : {false, true}) {
    BOOST_TEST_CONTEXT((dynamic ? "dynamic" : "static")) {
      GradScaler scaler = dynamic ? GradScaler(DynamicScalerConfig{.InitialScale = 4.0f}) : GradScaler::Static(4.0f);
      scaler.SetAmaxTracking(true);
      scaler.LoadStateDict(scaler.StateDict());
      BOOST_TEST(scaler.AmaxTracking());
      BOOST_TEST(scaler.Scaler()->RecordedAmax().has_value());
      RecordingOptimizer optimizer(Scaled(4.0f, false));
      scaler.Scale(Scalar(1.0f));
      BOOST_TEST(scaler.Step(optimizer));
      BOOST_TEST(AmaxOf(scaler) == 6.0f);
    }
  }
}

BOOST_AUTO_TEST_CASE(DisabledIterationHasNone) {
  GradScaler scaler(DynamicScalerConfig{.InitialScale = 8.0f});
  scaler.SetAmaxTracking(true);
  scaler.Disable();
  RecordingOptimizer optimizer(Scaled(8.0f, false));
  scaler.Scale(Scalar(1.0f));
  scaler.Step(optimizer);
  BOOST_TEST(!scaler.LastAmax().has_value());
}

BOOST_AUTO_TEST_CASE(ScalerWithoutTrackingIsRefused) {
  GradScaler scaler(std::make_shared<AmaxlessScaler>());
  BOOST_CHECK_THROW(scaler.SetAmaxTracking(true), InvalidOperationError);
  BOOST_TEST(!scaler.AmaxTracking());
  scaler.SetAmaxTracking(false);  // turning it off always works
  BOOST_TEST(!scaler.AmaxTracking());
}

BOOST_AUTO_TEST_SUITE_END()
