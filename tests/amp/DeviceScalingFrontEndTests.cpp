// The amp front-ends on a device-scaling backend, proved without a GPU: the
// fake backend of FakeDeviceBackend.hpp keeps the scaler state "on the device"
// in host memory and counts every host synchronisation. The device path must
// follow the host path bit for bit (scales, counters, skipped steps, unscaled
// gradients) while the step-time calls claimed synchronisation-free make no
// synchronisation at all.
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "amp/AmpTestUtil.hpp"
#include "amp/FakeDeviceBackend.hpp"

using namespace mlframework;
using mlfw_test::FakeBackend;
using mlfw_test::FakeTensor;
using mlfw_test::HalvingScaler;
using mlfw_test::RandomOverflows;
using mlfw_test::SyncsDuring;

namespace {

std::vector<std::uint32_t> ValueBits(const std::vector<float>& values) {
  std::vector<std::uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  return bits;
}

// Gradients of one step: FP16, BF16 and FP32 entries; `overflow` poisons one FP16 element.
// Values grow with `step` so the FP16 entry overflows under large scales too.
GradientMap StepGradients(int step, bool overflow, bool on_device, int device = 0) {
  std::vector<float> a = {0.5f * static_cast<float>(step % 7 + 1), -3.0f, 1000.0f, 0.001f};
  const std::vector<float> b = {2.0f, -0.25f, static_cast<float>(step % 11)};
  const std::vector<float> c = {1.0f, -2.0f};
  if (overflow) {
    a[1] = std::numeric_limits<float>::infinity();
  }
  if (on_device) {
    return {{"a", FakeTensor(a, {4}, DataType::Float16, device)},
            {"b", FakeTensor(b, {3}, DataType::BFloat16, device)},
            {"c", FakeTensor(c, {2}, DataType::Float32, device)}};
  }
  return {{"a", FromVector(a, {4}, DataType::Float16)},
          {"b", FromVector(b, {3}, DataType::BFloat16)},
          {"c", FromVector(c, {2}, DataType::Float32)}};
}

void CheckSameGradients(const GradientMap& host, const GradientMap& device) {
  BOOST_TEST_REQUIRE(host.size() == device.size());
  for (const auto& [name, tensor] : host) {
    BOOST_TEST_INFO("gradient " << name);
    BOOST_TEST(DeviceScalingOf(*device.at(name)) == &FakeBackend());
    BOOST_TEST(device.at(name)->GetDataType() == tensor->GetDataType());
    BOOST_TEST(ValueBits(tensor->ToFloatVector()) == ValueBits(mlfw_test::Peek(device.at(name))),
               boost::test_tools::per_element());
  }
}

const amp::DynamicScalerConfig kConfig{.InitialScale = 1024.0f,
                                       .GrowthFactor = 2.0f,
                                       .BackoffFactor = 0.5f,
                                       .GrowthInterval = 3,
                                       .MinScale = 1.0f,
                                       .MaxScale = 8192.0f,
                                       .Hysteresis = 2};

}  // namespace

BOOST_AUTO_TEST_SUITE(DeviceScalingFrontEnds)

BOOST_AUTO_TEST_CASE(DynamicScalerDeviceTrajectoryIsBitEqualAndSyncFree) {
  for (const unsigned seed : {1u, 7u, 42u}) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      amp::DynamicLossScaler host(kConfig);
      amp::DynamicLossScaler device(kConfig);
      const std::vector<bool> pattern = RandomOverflows(seed, 40);
      for (int step = 0; step < static_cast<int>(pattern.size()); ++step) {
        const TensorPtr host_loss = host.ScaleLoss(Scalar(0.3f));
        const GradientMap host_grads = host.UnscaleAndRecordOverflow(StepGradients(step, pattern[step], false));
        const bool host_overflow = host.RecordedOverflow();
        host.UpdateScaleFromRecord();

        const GradientMap device_input = StepGradients(step, pattern[step], true);
        const TensorPtr device_loss_input = FakeTensor({0.3f}, {}, DataType::Float32);
        TensorPtr device_loss;
        GradientMap device_grads;
        const std::int64_t syncs = SyncsDuring([&] {
          device_loss = device.ScaleLoss(device_loss_input);
          device_grads = device.UnscaleAndRecordOverflow(device_input);
          device.UpdateScaleFromRecord();
        });
        // Step 0 moves the state to the device (CreateScaleState waits for one copy); then none.
        BOOST_TEST(syncs == (step == 0 ? 1 : 0));
        BOOST_TEST_REQUIRE(device.DeviceState() != nullptr);
        BOOST_TEST(ValueBits(host_loss->ToFloatVector()) == ValueBits(mlfw_test::Peek(device_loss)),
                   boost::test_tools::per_element());
        CheckSameGradients(host_grads, device_grads);
        BOOST_TEST(host_overflow == static_cast<bool>(pattern[step]));
        BOOST_TEST(device.DeviceState()->LastStepSkipped() == host_overflow);
        const amp::ScaleState h = host.State();
        const amp::ScaleState d = device.State();
        BOOST_TEST(std::bit_cast<std::uint32_t>(h.Scale) == std::bit_cast<std::uint32_t>(d.Scale));
        BOOST_TEST((h == d));
      }
      BOOST_TEST(host.GetStats()->SkippedSteps > 0);
      BOOST_TEST(host.GetStats()->SuccessfulSteps > 0);
    }
  }
}

BOOST_AUTO_TEST_CASE(UpdateScaleWithHostDecisionIsSyncFreeAndOverridesTheRecord) {
  amp::DynamicLossScaler host(kConfig);
  amp::DynamicLossScaler device(kConfig);
  device.UnscaleGradients(StepGradients(0, false, true));  // moves the state to the device
  host.UnscaleGradients(StepGradients(0, false, false));
  const std::vector<bool> pattern = RandomOverflows(3, 30);
  for (std::size_t step = 0; step < pattern.size(); ++step) {
    // The device flag says "overflow" every other step; the host decision wins, as on the host path.
    device.UnscaleGradients(StepGradients(static_cast<int>(step), step % 2 == 0, true));
    host.UnscaleGradients(StepGradients(static_cast<int>(step), step % 2 == 0, false));
    const std::int64_t syncs = SyncsDuring([&] { device.UpdateScale(pattern[step]); });
    host.UpdateScale(pattern[step]);
    BOOST_TEST(syncs == 0);
    BOOST_TEST((host.State() == device.State()));
    BOOST_TEST((host.State() == device.DeviceState()->Read()));  // the device's own copy, not a cache
    BOOST_TEST(device.DeviceState()->LastStepSkipped() == static_cast<bool>(pattern[step]));
    BOOST_TEST(!device.RecordedOverflow());
  }
}

BOOST_AUTO_TEST_CASE(HostReadsOnlyWhenAsked) {
  amp::DynamicLossScaler device(kConfig);
  device.UnscaleGradients(StepGradients(0, true, true));
  device.UpdateScaleFromRecord();
  const amp::DynamicLossScaler host_reference = [] {
    amp::DynamicLossScaler s(kConfig);
    s.UpdateScale(true);
    return s;
  }();
  float scale = 0.0f;
  BOOST_TEST(SyncsDuring([&] { scale = device.CurrentScale(); }) == 1);
  BOOST_TEST(scale == host_reference.CurrentScale());
  // Reads are cached until the next device update: stats and save after CurrentScale() are free.
  amp::DynamicScalerStats stats;
  BOOST_TEST(SyncsDuring([&] { stats = device.GetStats().value(); }) == 0);
  BOOST_TEST(stats.TotalOverflows == 1);
  BOOST_TEST(stats.ConsecutiveOverflows == 1);
  std::vector<std::byte> blob;
  BOOST_TEST(SyncsDuring([&] { blob = device.StateDict(); }) == 0);
  // The saved blob is the host scaler's byte for byte: the state has one truth.
  BOOST_TEST((blob == host_reference.StateDict()));
  bool recorded = true;
  BOOST_TEST(SyncsDuring([&] { recorded = device.RecordedOverflow(); }) == 0);  // known clear: no read
  BOOST_TEST(!recorded);
  device.RecordOverflow(StepGradients(1, true, true));
  BOOST_TEST(SyncsDuring([&] { recorded = device.RecordedOverflow(); }) == 1);
  BOOST_TEST(recorded);
  device.UpdateScaleFromRecord();  // second overflow in a row: backs off (hysteresis 2)
  BOOST_TEST(SyncsDuring([&] { stats = device.GetStats().value(); }) == 1);
  BOOST_TEST(stats.CurrentScale == kConfig.InitialScale * kConfig.BackoffFactor);
  BOOST_TEST(SyncsDuring([&] { scale = device.CurrentScale(); }) == 0);
  BOOST_TEST(scale == stats.CurrentScale);
}

BOOST_AUTO_TEST_CASE(SaveRestoreRoundTripsAcrossHostAndDevice) {
  amp::DynamicLossScaler host(kConfig);
  amp::DynamicLossScaler device(kConfig);
  const std::vector<bool> pattern = RandomOverflows(11, 24);
  for (int step = 0; step < 12; ++step) {
    host.UnscaleGradients(StepGradients(step, pattern[step], false));
    host.UpdateScaleFromRecord();
    device.UnscaleGradients(StepGradients(step, pattern[step], true));
    device.UpdateScaleFromRecord();
  }
  // Device -> blob -> a fresh scaler that continues on the device.
  amp::DynamicLossScaler restored(kConfig);
  restored.LoadStateDict(device.StateDict());
  BOOST_TEST(restored.DeviceState() == nullptr);  // host-owned until its next device operation
  BOOST_TEST((restored.State() == host.State()));
  // Reset on the device owner writes the device state.
  amp::DynamicLossScaler reset_copy(device);
  BOOST_TEST((reset_copy.State() == device.State()));
  for (int step = 12; step < 24; ++step) {
    host.UnscaleGradients(StepGradients(step, pattern[step], false));
    host.UpdateScaleFromRecord();
    restored.UnscaleGradients(StepGradients(step, pattern[step], true));
    restored.UpdateScaleFromRecord();
  }
  BOOST_TEST((restored.State() == host.State()));
  BOOST_TEST((restored.StateDict() == host.StateDict()));
  restored.Reset();
  BOOST_TEST(restored.DeviceState() != nullptr);
  BOOST_TEST((restored.DeviceState()->Read() == amp::ScaleState::Initial(kConfig.ToScalePolicy())));
}

BOOST_AUTO_TEST_CASE(MixedHostAndDeviceListIsAnArgumentErrorAndChangesNothing) {
  amp::DynamicLossScaler scaler(kConfig);
  scaler.UnscaleGradients(StepGradients(0, false, true));
  scaler.UpdateScaleFromRecord();
  const amp::ScaleState before = scaler.State();
  const GradientMap mixed = {{"a", FakeTensor({1.0f, 2.0f}, {2}, DataType::Float32)},
                             {"b", FromVector({3.0f}, {1}, DataType::Float32)}};
  try {
    scaler.UnscaleGradients(mixed);
    BOOST_FAIL("expected ArgumentError");
  } catch (const ArgumentError& error) {
    BOOST_TEST(std::string(error.what()).find("gradients[1]") != std::string::npos);
    BOOST_TEST(std::string(error.what()).find("cpu") != std::string::npos);
  }
  BOOST_CHECK_THROW(scaler.CheckOverflow(mixed), ArgumentError);
  BOOST_CHECK_THROW(scaler.RecordOverflow(mixed), ArgumentError);
  const GradientMap two_devices = {{"a", FakeTensor({1.0f}, {1}, DataType::Float32, 0)},
                                   {"b", FakeTensor({1.0f}, {1}, DataType::Float32, 1)}};
  BOOST_CHECK_THROW(scaler.UnscaleGradients(two_devices), ArgumentError);
  BOOST_TEST(mlfw_test::Peek(mixed.at("a"))[0] == 1.0f);  // nothing was unscaled
  BOOST_TEST(scaler.DeviceState() != nullptr);            // the state did not move
  BOOST_TEST((scaler.State() == before));
  BOOST_TEST(!scaler.RecordedOverflow());
  // An empty list says nothing about where the step runs: the state stays on the device.
  BOOST_TEST(scaler.UnscaleGradients(GradientMap{}).empty());
  BOOST_TEST(scaler.DeviceState() != nullptr);
}

// core's passes with a device state take the tensors of the state's backend only: a host tensor
// in the list is named before anything is written or recorded.
BOOST_AUTO_TEST_CASE(APassWithADeviceStateNamesATensorOfAnotherBackend) {
  const amp::ScalePolicy policy = kConfig.ToScalePolicy();
  const auto state = FakeBackend().CreateScaleState(Device::CUDA(0), policy, amp::ScaleState::Initial(policy));
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<TensorPtr> mixed = {FakeTensor({2.0f, inf}, {2}, DataType::Float32),
                                        FromVector({3.0f}, {1}, DataType::Float32)};
  const auto names_second = [](const ArgumentError& e) { return e.Parameter() == "tensors[1]"; };
  BOOST_CHECK_EXCEPTION(WritePass(mixed, {}, {.State = state.get()}), ArgumentError, names_second);
  BOOST_CHECK_EXCEPTION(ReadPass(mixed, {.State = state.get()}), ArgumentError, names_second);
  const std::vector<TensorPtr> dst = {FakeTensor({0.0f, 0.0f}, {2}, DataType::Float32), Zeros({1})};
  BOOST_CHECK_EXCEPTION(WritePass(mixed, dst, {.Op = WriteOp::Cast, .State = state.get()}), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "src[1]"; });
  BOOST_TEST(mlfw_test::Peek(mixed[0])[0] == 2.0f);
  BOOST_TEST(mlfw_test::Peek(dst[0])[0] == 0.0f);
  BOOST_TEST(!state->FoundInf());
  // The device tensors alone: unscaled on the "device", the Inf recorded there.
  WritePass(std::span<const TensorPtr>(mixed).first(1), {}, {.State = state.get()});
  BOOST_TEST(mlfw_test::Peek(mixed[0])[0] == 2.0f / policy.InitialScale);
  BOOST_TEST(state->FoundInf());
}

BOOST_AUTO_TEST_CASE(StateFollowsTheGradientsBetweenHostAndDevices) {
  amp::DynamicLossScaler host(kConfig);
  amp::DynamicLossScaler moving(kConfig);
  const std::vector<bool> pattern = RandomOverflows(5, 18);
  for (int step = 0; step < 18; ++step) {
    const int where = step % 3;  // host, device 0, device 1
    host.UnscaleGradients(StepGradients(step, pattern[step], false));
    const GradientMap grads = moving.UnscaleGradients(StepGradients(step, pattern[step], where != 0, where - 1));
    host.UpdateScaleFromRecord();
    moving.UpdateScaleFromRecord();
    BOOST_TEST((moving.DeviceState() == nullptr) == (where == 0));
    if (where != 0) {
      BOOST_TEST(moving.DeviceState()->GetDevice() == Device::CUDA(where - 1));
    }
    BOOST_TEST((moving.State() == host.State()));
  }
}

BOOST_AUTO_TEST_CASE(BoolReturningCallsReturnTheirOwnResultAndKeepTheRecord) {
  amp::DynamicLossScaler scaler(kConfig);
  scaler.UnscaleGradients(StepGradients(0, true, true));  // record: overflow
  BOOST_TEST(!scaler.CheckOverflow(StepGradients(1, false, true)));
  BOOST_TEST(scaler.CheckOverflow(StepGradients(1, true, true)));
  const amp::UnscaledGradients clean = scaler.UnscaleGradientsAndCheck(StepGradients(2, false, true));
  BOOST_TEST(!clean.Overflow);
  BOOST_TEST(scaler.RecordedOverflow());  // the first call's overflow is still recorded
  scaler.ClearRecordedOverflow();
  BOOST_TEST(scaler.CheckOverflow(StepGradients(3, true, true)));
  BOOST_TEST(!scaler.RecordedOverflow());
  const float inf = std::numeric_limits<float>::infinity();
  BOOST_TEST(scaler.CheckOverflow(FakeTensor({1.0f, inf}, {2}, DataType::BFloat16)));
  BOOST_TEST(!scaler.CheckOverflow(FakeTensor({1.0f, 2.0f}, {2}, DataType::BFloat16)));
  BOOST_TEST(!scaler.RecordedOverflow());
  const TensorPtr one = scaler.UnscaleGradient(FakeTensor({1.0f, 2.0f}, {2}, DataType::Float16));
  BOOST_TEST(one->GetDataType() == DataType::Float32);
  BOOST_TEST(DeviceScalingOf(*one) == &FakeBackend());
  BOOST_TEST(mlfw_test::Peek(one)[1] == 2.0f / kConfig.InitialScale);
}

BOOST_AUTO_TEST_CASE(GradScalerStepSyncsOnceManualFlowNever) {
  amp::GradScaler host(kConfig);
  amp::GradScaler device(kConfig);
  mlfw_test::RecordingOptimizer host_opt;
  mlfw_test::RecordingOptimizer device_opt;
  const std::vector<bool> pattern = RandomOverflows(9, 30);
  for (int step = 0; step < static_cast<int>(pattern.size()); ++step) {
    BOOST_TEST_CONTEXT("step " << step) {
      host_opt.Load(StepGradients(step, pattern[step], false));
      device_opt.Load(StepGradients(step, pattern[step], true));
      host.Scale(Scalar(1.0f));
      const TensorPtr loss = FakeTensor({1.0f}, {}, DataType::Float32);
      if (step % 2 == 0) {
        // Automatic flow: Step must decide whether to call optimizer.Step() and return it.
        const bool host_stepped = host.Step(host_opt);
        bool device_stepped = false;
        const std::int64_t syncs = SyncsDuring([&] {
          device.Scale(loss);
          device_stepped = device.Step(device_opt);
        });
        BOOST_TEST(syncs == (step == 0 ? 2 : 1));  // the found-inf read (+ state creation once)
        BOOST_TEST(host_stepped == device_stepped);
        BOOST_TEST(host_stepped == !pattern[step]);
      } else {
        // Manual flow: Unscale, (a fused optimizer would read the flag on the device), Update.
        const GradientMap host_grads = host.Unscale(host_opt.GetGradients());
        host.Update();
        GradientMap device_grads;
        const std::int64_t syncs = SyncsDuring([&] {
          device.Scale(loss);
          device_grads = device.Unscale(device_opt.GetGradients());
          device.Update();
        });
        BOOST_TEST(syncs == 0);
        CheckSameGradients(host_grads, device_grads);
      }
      BOOST_TEST(host_opt.steps == device_opt.steps);
      BOOST_TEST(host.CurrentScale() == device.CurrentScale());
      BOOST_TEST((host.GetStats()->TotalOverflows == device.GetStats()->TotalOverflows));
    }
  }
  BOOST_TEST(device_opt.steps > 0);
  // The optimizer received FP32 unscaled gradients of the device backend.
  for (const auto& [name, tensor] : device_opt.stepped_with) {
    BOOST_TEST(tensor->GetDataType() == DataType::Float32);
    BOOST_TEST(DeviceScalingOf(*tensor) == &FakeBackend());
  }
  CheckSameGradients(host_opt.stepped_with, device_opt.stepped_with);
}

BOOST_AUTO_TEST_CASE(GradScalerSaveRestoreMidIterationAndManualSkip) {
  amp::GradScaler device(kConfig);
  amp::GradScaler host(kConfig);
  // Spec 004's manual flow that skips Update() on overflow: the next Scale(loss) applies it once.
  device.Scale(FakeTensor({1.0f}, {}, DataType::Float32));
  device.Unscale(StepGradients(0, true, true));
  host.Scale(Scalar(1.0f));
  host.Unscale(StepGradients(0, true, false));
  BOOST_TEST(device.CheckOverflow(StepGradients(0, false, true)) == false);
  host.CheckOverflow(StepGradients(0, false, false));
  // Saving mid-iteration reads the device flag (the blob holds the iteration's found-inf).
  const std::vector<std::byte> blob = device.StateDict();
  BOOST_TEST((blob == host.StateDict()));
  amp::GradScaler restored(kConfig);
  restored.LoadStateDict(blob);
  restored.Scale(FakeTensor({1.0f}, {}, DataType::Float32));  // applies the saved overflow once
  device.Scale(FakeTensor({1.0f}, {}, DataType::Float32));
  host.Scale(Scalar(1.0f));
  BOOST_TEST(restored.GetStats()->TotalOverflows == 1);
  BOOST_TEST(device.GetStats()->TotalOverflows == 1);
  BOOST_TEST(host.CurrentScale() == device.CurrentScale());
  BOOST_TEST(host.CurrentScale() == restored.CurrentScale());
}

BOOST_AUTO_TEST_CASE(GradScalerCheckFirstFlowAndACustomScalerOnTheDevice) {
  // CheckOverflow first (it returns a bool: one read), then Unscale and Update without a read.
  amp::GradScaler device(kConfig);
  amp::GradScaler host(kConfig);
  for (int step = 0; step < 6; ++step) {
    BOOST_TEST_CONTEXT("step " << step) {
      const bool overflow = step % 3 == 1;
      device.Scale(FakeTensor({1.0f}, {}, DataType::Float32));
      host.Scale(Scalar(1.0f));
      const GradientMap device_grads = StepGradients(step, overflow, true);
      bool found = false;
      BOOST_TEST(SyncsDuring([&] { found = device.CheckOverflow(device_grads); }) == (step == 0 ? 2 : 1));
      BOOST_TEST(found == overflow);
      BOOST_TEST(host.CheckOverflow(StepGradients(step, overflow, false)) == overflow);
      BOOST_TEST(SyncsDuring([&] {
                   device.Unscale(device_grads);
                   device.Update();
                 }) == 0);
      host.Update();
      BOOST_TEST(host.CurrentScale() == device.CurrentScale());
      BOOST_TEST((host.GetStats()->TotalOverflows == device.GetStats()->TotalOverflows));
    }
  }
  // A user's ILossScaler on device gradients: the same steps, skips and scales as on the host.
  amp::GradScaler custom_device(std::make_shared<HalvingScaler>());
  amp::GradScaler custom_host(std::make_shared<HalvingScaler>());
  mlfw_test::RecordingOptimizer device_opt;
  mlfw_test::RecordingOptimizer host_opt;
  for (int step = 0; step < 6; ++step) {
    BOOST_TEST_CONTEXT("custom step " << step) {
      const bool overflow = step % 2 == 1;
      device_opt.Load(StepGradients(step, overflow, true));
      host_opt.Load(StepGradients(step, overflow, false));
      custom_device.Scale(FakeTensor({1.0f}, {}, DataType::Float32));
      custom_host.Scale(Scalar(1.0f));
      BOOST_TEST(custom_device.Step(device_opt) == !overflow);
      BOOST_TEST(custom_host.Step(host_opt) == !overflow);
      BOOST_TEST(custom_device.CurrentScale() == custom_host.CurrentScale());
    }
  }
  BOOST_TEST(device_opt.steps == 3);
  CheckSameGradients(host_opt.stepped_with, device_opt.stepped_with);
  BOOST_TEST((custom_device.StateDict() == custom_host.StateDict()));
}

BOOST_AUTO_TEST_SUITE_END()
