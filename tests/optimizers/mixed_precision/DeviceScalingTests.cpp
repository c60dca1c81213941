// The mixed-precision stack on a device-scaling backend, without a GPU: the
// fake backend (tests/amp/FakeDeviceBackend.hpp) keeps the scaler state "on the
// device" and counts host synchronisations. The device path of the scaler and
// of GradientConversionLayer's two-pass pipeline must give the host path's
// bits, scales and skip decisions with the synchronisations documented in
// docs/cuda-backend.md: none in the scaler's step calls, one per
// ProcessGradients without clipping, two with clipping.
#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>

#include "amp/FakeDeviceBackend.hpp"
#include "optimizers/mixed_precision/TestHelpers.hpp"

using namespace mlframework;
using namespace mlframework::optimizers::mixed_precision;
using mlfw_test::FakeBackend;
using mlfw_test::FakeTensor;
using mlfw_test::RandomOverflows;
using mlfw_test::SyncsDuring;

namespace {

GradientMap Gradients(int step, bool overflow, bool on_device) {
  std::vector<float> a = {0.25f * static_cast<float>(step % 5 + 1), -3.0f, 100.0f, 0.001f};
  const std::vector<float> b = {2.0f, -0.25f, static_cast<float>(step % 9)};
  const std::vector<float> c = {1.0f, -2.0f, 0.5f};
  if (overflow) {
    a[2] = step % 2 == 0 ? mlfw_test::kInf : mlfw_test::kNaN;
  }
  if (on_device) {
    return {{"a", FakeTensor(a, {4}, DataType::Float16)},
            {"b", FakeTensor(b, {3}, DataType::BFloat16)},
            {"c", FakeTensor(c, {3}, DataType::Float32)}};
  }
  return {{"a", FromVector(a, {4}, DataType::Float16)},
          {"b", FromVector(b, {3}, DataType::BFloat16)},
          {"c", FromVector(c, {3}, DataType::Float32)}};
}

std::vector<std::uint32_t> Bits(const std::vector<float>& values) {
  std::vector<std::uint32_t> bits;
  bits.reserve(values.size());
  for (const float v : values) {
    bits.push_back(std::bit_cast<std::uint32_t>(v));
  }
  return bits;
}

void CheckSame(const GradientMap& host, const GradientMap& device) {
  BOOST_TEST_REQUIRE(host.size() == device.size());
  for (const auto& [name, tensor] : host) {
    BOOST_TEST_INFO("gradient " << name);
    BOOST_TEST(DeviceScalingOf(*device.at(name)) == &FakeBackend());
    BOOST_TEST(device.at(name)->GetDataType() == DataType::Float32);
    BOOST_TEST(Bits(tensor->ToFloatVector()) == Bits(mlfw_test::Peek(device.at(name))),
               boost::test_tools::per_element());
  }
}

MixedPrecisionOptions Options(bool clipping) {
  return MixedPrecisionOptions{.InitialLossScale = 1024.0f,
                               .GrowthInterval = 3,
                               .MaxLossScale = 8192.0f,
                               .MaxConsecutiveOverflows = 4,
                               .EnableGradientClipping = clipping,
                               .MaxGradNorm = 2.0f,
                               .EnableAutoFallback = true};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(MixedPrecisionOnDevice)

BOOST_AUTO_TEST_CASE(ScalerStepCallsAreSyncFreeAndFollowTheHost) {
  DynamicLossScaler host(Options(false));
  DynamicLossScaler device(Options(false));
  const std::vector<bool> pattern = RandomOverflows(17, 40);
  for (int step = 0; step < static_cast<int>(pattern.size()); ++step) {
    BOOST_TEST_CONTEXT("step " << step) {
      const GradientMap host_grads = host.UnscaleGradients(Gradients(step, pattern[step], false));
      host.RecordOverflow(Gradients(step, pattern[step], false));
      host.UpdateScaleFromRecord();
      const GradientMap input = Gradients(step, pattern[step], true);
      GradientMap device_grads;
      const std::int64_t syncs = SyncsDuring([&] {
        device_grads = device.UnscaleGradients(input);
        device.RecordOverflow(input);
        device.UpdateScaleFromRecord();
      });
      BOOST_TEST(syncs == (step == 0 ? 1 : 0));  // step 0 creates the device state
      if (!pattern[step]) {
        CheckSame(host_grads, device_grads);
      }
      BOOST_TEST(device.DeviceState()->LastStepSkipped() == static_cast<bool>(pattern[step]));
      BOOST_TEST(host.State() == device.State());
      BOOST_TEST(std::bit_cast<std::uint32_t>(host.CurrentScale()) ==
                 std::bit_cast<std::uint32_t>(device.CurrentScale()));
    }
  }
  // The bool API and the counters agree too; reading several counters costs one read.
  const GradientMap bad = Gradients(1, true, true);
  bool skip = false;
  BOOST_TEST(SyncsDuring([&] { skip = device.CheckOverflowAndUpdate(bad); }) == 1);
  BOOST_TEST(skip == host.CheckOverflowAndUpdate(Gradients(1, true, false)));
  BOOST_TEST(SyncsDuring([&] {
               BOOST_TEST(device.TotalOverflows() == host.TotalOverflows());
               BOOST_TEST(device.ConsecutiveOverflows() == host.ConsecutiveOverflows());
               BOOST_TEST(device.IsStable() == host.IsStable());
             }) == 0);  // cached by CheckOverflowAndUpdate's read
  BOOST_TEST((device.StateDict() == host.StateDict()));
  const TensorPtr loss = FakeTensor({0.5f}, {}, DataType::Float32);
  TensorPtr scaled;
  BOOST_TEST(SyncsDuring([&] { scaled = device.ScaleLoss(loss); }) == 0);
  BOOST_TEST(mlfw_test::Peek(scaled)[0] == 0.5f * host.CurrentScale());
}

BOOST_AUTO_TEST_CASE(PipelineMatchesHostWithOneSyncPerStep) {
  for (const bool clipping : {false, true}) {
    BOOST_TEST_CONTEXT("clipping " << clipping) {
      GradientConversionLayer host(Options(clipping));
      GradientConversionLayer device(Options(clipping));
      const std::vector<bool> pattern = RandomOverflows(23, 36);
      for (int step = 0; step < static_cast<int>(pattern.size()); ++step) {
        BOOST_TEST_CONTEXT("step " << step) {
          const GradientProcessingResult expected = host.ProcessGradients(Gradients(step, pattern[step], false));
          const GradientMap input = Gradients(step, pattern[step], true);
          GradientProcessingResult got;
          const std::int64_t syncs = SyncsDuring([&] { got = device.ProcessGradients(input); });
          // Without clipping: the update's result (ShouldSkip) is read once. With clipping: the
          // norm, and pass 2's flag on kept steps. Step 0 also creates the device state.
          const std::int64_t expected_syncs = (step == 0 ? 1 : 0) + (clipping ? (pattern[step] ? 1 : 2) : 1);
          BOOST_TEST(syncs == expected_syncs);
          BOOST_TEST(got.ShouldSkip == expected.ShouldSkip);
          BOOST_TEST(got.ShouldSkip == static_cast<bool>(pattern[step]));
          if (!expected.ShouldSkip) {
            CheckSame(expected.Gradients, got.Gradients);
          } else {
            BOOST_TEST(got.Gradients.empty());
            // A skipped step leaves the FP32 input untouched, as on the host.
            BOOST_TEST(mlfw_test::Peek(input.at("c"))[0] == 1.0f);
          }
          BOOST_TEST(device.LossScaler()->State() == host.LossScaler()->State());
          BOOST_TEST(device.LastGradientNorm() == host.LastGradientNorm());
          BOOST_TEST(device.ClipCount() == host.ClipCount());
        }
      }
      BOOST_TEST(device.LossScaler()->DeviceState() != nullptr);
      BOOST_TEST((device.StateDict() == host.StateDict()));
    }
  }
}

BOOST_AUTO_TEST_CASE(AutoFallbackAndRestoreOnDevice) {
  GradientConversionLayer host(Options(false));
  GradientConversionLayer device(Options(false));
  // 10 back-offs from 1024 to the minimum 1, then MaxConsecutiveOverflows = 4 overflows in a row
  // at the minimum: the 14th step falls back, on the device as on the host.
  for (int step = 0; step < 14; ++step) {
    const bool host_fell_back = host.ProcessGradients(Gradients(step, true, false)).FellBackToFP32;
    const bool device_fell_back = device.ProcessGradients(Gradients(step, true, true)).FellBackToFP32;
    BOOST_TEST(host_fell_back == (step == 13));
    BOOST_TEST(device_fell_back == (step == 13));
  }
  BOOST_TEST(host.Precision()->HasFallenBack());
  BOOST_TEST(device.Precision()->HasFallenBack());
  BOOST_TEST(device.LossScaler()->CurrentScale() == 1.0f);
  BOOST_TEST(device.LossScaler()->State() == host.LossScaler()->State());
  // After the fallback scaling is off, clean gradients pass at scale 1, and overflowed steps
  // are still skipped, on the device as on the host.
  BOOST_TEST(device.GetStats().FallbackStep == 14);
  const GradientProcessingResult kept = device.ProcessGradients(Gradients(6, false, true));
  BOOST_TEST(!kept.ShouldSkip);
  BOOST_TEST(!host.ProcessGradients(Gradients(6, false, false)).ShouldSkip);
  const GradientProcessingResult overflowed = device.ProcessGradients(Gradients(7, true, true));
  BOOST_TEST(overflowed.ShouldSkip);
  BOOST_TEST(overflowed.Gradients.empty());
  BOOST_TEST(host.ProcessGradients(Gradients(7, true, false)).ShouldSkip);
  BOOST_TEST(device.LossScaler()->CurrentScale() == 1.0f);
  BOOST_TEST(device.LossScaler()->State() == host.LossScaler()->State());
  const std::vector<std::byte> blob = device.StateDict();
  BOOST_TEST((blob == host.StateDict()));
  GradientConversionLayer restored(Options(false));
  restored.LoadStateDict(blob);
  BOOST_TEST(restored.LossScaler()->State() == host.LossScaler()->State());
  BOOST_TEST(restored.Precision()->HasFallenBack());
}

BOOST_AUTO_TEST_CASE(MixedListIsAnArgumentErrorAndChangesNothing) {
  GradientConversionLayer layer(Options(false));
  layer.ProcessGradients(Gradients(0, false, true));
  const amp::ScaleState before = layer.LossScaler()->State();
  const GradientMap mixed = {{"a", FakeTensor({1.0f}, {1}, DataType::Float16)},
                             {"b", FromVector({1.0f}, {1}, DataType::Float16)}};
  BOOST_CHECK_THROW(layer.ProcessGradients(mixed), ArgumentError);
  BOOST_CHECK_THROW(layer.LossScaler()->UnscaleGradients(mixed), ArgumentError);
  BOOST_CHECK_THROW(layer.LossScaler()->CheckOverflow(mixed), ArgumentError);
  BOOST_TEST(layer.LossScaler()->State() == before);
  BOOST_TEST(layer.LossScaler()->DeviceState() != nullptr);
}

BOOST_AUTO_TEST_SUITE_END()
