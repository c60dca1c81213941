// FSDPMixedPrecisionManager on a device-scaling backend, without a GPU or a
// second rank: fake device tensors (tests/amp/FakeDeviceBackend.hpp) and a
// process-group double that plays the other ranks. With an "nccl" group the
// found-inf flag must be agreed through a one-element device tensor
// (AllReduce MAX), never through AllReduceHost, with one read of the scaler
// state per decision (the returned bool); with an "mpi" group the host path
// stays. (The real NcclProcessGroup::AllReduce returns once enqueued unless
// NcclProcessGroupOptions::Blocking; the double never waits, so the count is the
// manager's own.)
// Decisions, scales and counters must equal the host path's.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>

#include "amp/FakeDeviceBackend.hpp"

using namespace mlframework;
namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;
using mlfw_test::FakeBackend;
using mlfw_test::FakeTensor;
using mlfw_test::SyncsDuring;

namespace {

// Rank 0 of a two-rank group whose other rank reports `remote_overflow` in every reduction.
class TwoRankDouble final : public dist::IProcessGroup {
 public:
  explicit TwoRankDouble(std::string name) : name_(std::move(name)) {}
  int Rank() const noexcept override { return 0; }
  int WorldSize() const noexcept override { return 2; }
  std::string_view BackendName() const noexcept override { return name_; }
  void AllGather(const ITensor& /*input*/, ITensor& /*output*/) override { Unexpected("AllGather"); }
  void ReduceScatter(const ITensor& /*input*/, ITensor& /*output*/, dist::ReduceOp /*op*/) override {
    Unexpected("ReduceScatter");
  }
  void AllReduce(ITensor& tensor, dist::ReduceOp op) override {
    ++device_reductions;
    BOOST_TEST((op == dist::ReduceOp::Max));
    BOOST_TEST(DeviceScalingOf(tensor) == &FakeBackend());  // a device tensor, reduced on the device
    const auto& fake = dynamic_cast<mlfw_test::FakeDeviceTensor&>(tensor);
    std::vector<float> values = fake.Peek();
    for (float& v : values) {
      v = std::max(v, remote_overflow ? 1.0f : 0.0f);
    }
    fake.Inner()->CopyFromFloats(values);
  }
  void Broadcast(ITensor& /*tensor*/, int /*root*/) override { Unexpected("Broadcast"); }
  void Barrier() override {}
  void AllReduceHost(std::span<double> values, dist::ReduceOp op) override {
    ++host_reductions;
    BOOST_TEST((op == dist::ReduceOp::Max));
    // The other rank's flag and amax (the first two values); it refuses nothing and asks for no
    // report (the values after them).
    for (std::size_t i = 0; i < std::min<std::size_t>(values.size(), 2); ++i) {
      values[i] = std::max(values[i], remote_overflow ? 1.0 : 0.0);
    }
  }
  void Abort(const std::string& message) noexcept override { aborted = message; }

  bool remote_overflow = false;
  int device_reductions = 0;
  int host_reductions = 0;
  std::string aborted;

 private:
  static void Unexpected(const char* call) { BOOST_FAIL(std::string("unexpected collective ") + call); }
  std::string name_;
};

GradientMap Gradients(int step, bool overflow, bool on_device) {
  std::vector<float> a = {1.0f, -2.0f * static_cast<float>(step % 3 + 1), 0.5f};
  const std::vector<float> b = {4.0f, -0.25f};
  if (overflow) {
    a[1] = std::numeric_limits<float>::infinity();
  }
  if (on_device) {
    return {{"a", FakeTensor(a, {3}, DataType::Float32)},
            {"b", FakeTensor(b, {2}, DataType::Float16)},
            {"skipped", nullptr}};
  }
  return {
      {"a", FromVector(a, {3}, DataType::Float32)}, {"b", FromVector(b, {2}, DataType::Float16)}, {"skipped", nullptr}};
}

const fsdp::FSDPMixedPrecisionConfig kConfig{.InitialLossScale = 1024.0f, .MaxLossScale = 8192.0f, .LossScaleSteps = 3};

}  // namespace

BOOST_AUTO_TEST_SUITE(FSDPDeviceAgreement)

BOOST_AUTO_TEST_CASE(NcclGroupAgreesOnTheDeviceWithOneReadPerDecision) {
  auto host_group = std::make_shared<TwoRankDouble>("mpi");
  auto device_group = std::make_shared<TwoRankDouble>("nccl");
  fsdp::FSDP host_model(host_group);
  fsdp::FSDP device_model(device_group);
  fsdp::FSDPMixedPrecisionManager host(kConfig, host_model);
  fsdp::FSDPMixedPrecisionManager device(kConfig, device_model);
  std::mt19937 rng(31);
  std::bernoulli_distribution coin(0.25);
  int overflows = 0;
  for (int step = 0; step < 40; ++step) {
    BOOST_TEST_CONTEXT("step " << step) {
      const bool local = coin(rng);
      const bool remote = coin(rng);
      host_group->remote_overflow = remote;
      device_group->remote_overflow = remote;
      const bool unscale = step % 2 == 1;
      const GradientMap host_grads = Gradients(step, local, false);
      const GradientMap device_grads = Gradients(step, local, true);
      const bool expected = unscale ? host.UnscaleAndCheckOverflow(host_grads) : host.CheckOverflow(host_grads);
      bool decided = false;
      const std::int64_t syncs = SyncsDuring([&] {
        decided = unscale ? device.UnscaleAndCheckOverflow(device_grads) : device.CheckOverflow(device_grads);
      });
      BOOST_TEST(decided == expected);
      BOOST_TEST(decided == (local || remote));  // the other rank's overflow skips this rank too
      BOOST_TEST(syncs == (step == 0 ? 2 : 1));  // the returned decision (+ state creation once)
      BOOST_TEST(device_group->host_reductions == 0);
      BOOST_TEST(device_group->device_reductions == step + 1);
      BOOST_TEST(device.DeviceState()->Read().Scale == host.CurrentScale());
      BOOST_TEST(device.StepsSinceLastOverflow() == host.StepsSinceLastOverflow());
      if (unscale && !local) {
        BOOST_TEST(mlfw_test::Peek(device_grads.at("a")) == host_grads.at("a")->ToFloatVector(),
                   boost::test_tools::per_element());
      }
      overflows += decided ? 1 : 0;
    }
  }
  BOOST_TEST(overflows > 0);
  BOOST_TEST(device.State().TotalOverflows == overflows);
  BOOST_TEST((device.StateDict() == host.StateDict()));
  // The loss is scaled on the device by the device scale.
  const TensorPtr loss = FakeTensor({1.5f}, {}, DataType::Float32);
  TensorPtr scaled;
  BOOST_TEST(SyncsDuring([&] { scaled = device.ScaleLoss(loss); }) == 0);
  BOOST_TEST(mlfw_test::Peek(scaled)[0] == 1.5f * host.CurrentScale());
  // Reset and restore write the device state.
  const std::vector<std::byte> blob = device.StateDict();
  device.ResetLossScale();
  BOOST_TEST(device.DeviceState()->Read().Scale == kConfig.InitialLossScale);
  device.LoadStateDict(blob);
  BOOST_TEST(device.DeviceState()->Read().Scale == host.CurrentScale());
}

BOOST_AUTO_TEST_CASE(MpiGroupKeepsTheHostAgreement) {
  auto host_group = std::make_shared<TwoRankDouble>("mpi");
  auto device_group = std::make_shared<TwoRankDouble>("mpi");
  fsdp::FSDP host_model(host_group);
  fsdp::FSDP device_model(device_group);
  fsdp::FSDPMixedPrecisionManager host(kConfig, host_model);
  fsdp::FSDPMixedPrecisionManager device(kConfig, device_model);
  for (int step = 0; step < 12; ++step) {
    const bool local = step % 4 == 1;
    const bool remote = step % 5 == 2;
    host_group->remote_overflow = remote;
    device_group->remote_overflow = remote;
    const bool expected = host.CheckOverflow(Gradients(step, local, false));
    BOOST_TEST(device.CheckOverflow(Gradients(step, local, true)) == expected);
    BOOST_TEST(expected == (local || remote));
    BOOST_TEST((device.State() == host.State()));
    BOOST_TEST((device.DeviceState()->Read() == host.State()));
  }
  BOOST_TEST(device_group->device_reductions == 0);
  BOOST_TEST(device_group->host_reductions == host_group->host_reductions);
}

BOOST_AUTO_TEST_CASE(MixedListIsAnArgumentError) {
  auto group = std::make_shared<TwoRankDouble>("nccl");
  fsdp::FSDP model(group);
  fsdp::FSDPMixedPrecisionManager manager(kConfig, model);
  const GradientMap mixed = {{"a", FakeTensor({1.0f}, {1}, DataType::Float32)},
                             {"b", FromVector({1.0f}, {1}, DataType::Float32)}};
  BOOST_CHECK_THROW(manager.CheckOverflow(mixed), ArgumentError);
  BOOST_CHECK_THROW(manager.UnscaleAndCheckOverflow(mixed), ArgumentError);
  BOOST_TEST(group->device_reductions == 0);
  BOOST_TEST(group->host_reductions == 0);
  BOOST_TEST(manager.CurrentScale() == kConfig.InitialLossScale);
  BOOST_TEST(manager.State().TotalSteps == 0);
}

// Amax tracking: the ranks agree on the largest amax in the same MAX reduction as the flag (no
// extra collective), on the device through a two-element flag tensor; the double's other rank
// reports an amax of 1 when it overflows, else 0.
BOOST_AUTO_TEST_CASE(AmaxIsAgreedInTheSameCollective) {
  for (const char* name : {"mpi", "nccl"}) {
    BOOST_TEST_CONTEXT(name) {
      const bool on_device = std::string(name) == "nccl";
      auto group = std::make_shared<TwoRankDouble>(name);
      fsdp::FSDP model(group);
      fsdp::FSDPMixedPrecisionManager manager(kConfig, model);
      BOOST_TEST(!manager.LastAmax().has_value());
      manager.SetAmaxTracking(true);
      BOOST_TEST(manager.AmaxTracking());
      for (int step = 0; step < 6; ++step) {
        BOOST_TEST_CONTEXT("step " << step) {
          const bool local = step == 2;
          group->remote_overflow = step == 4;
          const float scale = manager.CurrentScale();
          const GradientMap grads = Gradients(step, local, on_device);
          const int reductions = group->host_reductions + group->device_reductions;
          const bool overflow = manager.UnscaleAndCheckOverflow(grads);
          BOOST_TEST(overflow == (local || step == 4));
          BOOST_TEST(group->host_reductions + group->device_reductions == reductions + 1);
          // max |g| / scale over the finite values: 4 (b) or 2 * (step % 3 + 1) (a), unless Inf.
          const float a = local ? 0.0f : 2.0f * static_cast<float>(step % 3 + 1);
          const float expected = step == 4 ? 1.0f : std::max(a, 4.0f) / scale;
          BOOST_TEST(manager.LastAmax().value_or(-1.0f) == expected);
        }
      }
      BOOST_TEST((on_device ? group->host_reductions : group->device_reductions) == 0);
      manager.SetAmaxTracking(false);
      BOOST_TEST(!manager.LastAmax().has_value());
    }
  }
}

// Without loss scaling the gradients are only checked: their amax is the amax of the values.
BOOST_AUTO_TEST_CASE(AmaxWithoutLossScaling) {
  auto group = std::make_shared<TwoRankDouble>("mpi");
  fsdp::FSDP model(group);
  fsdp::FSDPMixedPrecisionConfig config = kConfig;
  config.UseLossScaling = false;
  fsdp::FSDPMixedPrecisionManager manager(config, model);
  manager.SetAmaxTracking(true);
  BOOST_TEST(!manager.UnscaleAndCheckOverflow(Gradients(1, false, false)));
  BOOST_TEST(manager.LastAmax().value_or(-1.0f) == 4.0f);
  BOOST_TEST(manager.UnscaleAndCheckOverflow(Gradients(1, true, false)));
  BOOST_TEST(manager.LastAmax().value_or(-1.0f) == 4.0f);
  BOOST_TEST(group->host_reductions == 2);
}

BOOST_AUTO_TEST_SUITE_END()
