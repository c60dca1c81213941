// The amp scalers work unchanged on CUDA tensors: DynamicLossScaler and
// GradScaler driven with CUDA gradients give the same bits, overflow decisions
// and scale trajectory as with CPU gradients. Needs a CUDA device.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/amp/GradScaler.hpp>
#include <mlframework/amp/IOptimizer.hpp>
#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "cuda/CudaTestUtil.hpp"

using namespace mlframework;
using mlfw_cuda_test::Bits;

namespace {

// Gradients of step `step` on `device`: FP16, BF16 and FP32 entries; some steps overflow.
GradientMap Gradients(int step, Device device) {
  std::vector<float> a = {0.5f * static_cast<float>(step), -3.0f, 1000.0f, 0.001f};
  std::vector<float> b = {2.0f, -0.25f, static_cast<float>(step)};
  if (step % 5 == 3) {
    a[1] = std::numeric_limits<float>::infinity();
  }
  return {{"a", FromVector(a, {4}, DataType::Float16, device)},
          {"b", FromVector(b, {3}, DataType::BFloat16, device)},
          {"c", FromVector({1.0f, -2.0f}, {2}, DataType::Float32, device)}};
}

void CheckSameGradients(const GradientMap& cpu, const GradientMap& gpu) {
  BOOST_TEST_REQUIRE(cpu.size() == gpu.size());
  for (const auto& [name, tensor] : cpu) {
    BOOST_TEST_INFO("gradient " << name);
    BOOST_TEST(gpu.at(name)->GetDevice().IsCUDA());
    BOOST_TEST(Bits(*tensor) == Bits(*gpu.at(name)), boost::test_tools::per_element());
  }
}

// An optimizer that records what it was given and whether it stepped.
class RecordingOptimizer final : public amp::IOptimizer {
 public:
  explicit RecordingOptimizer(GradientMap gradients) : gradients_(std::move(gradients)) {}
  GradientMap GetGradients() override { return gradients_; }
  void SetGradients(const GradientMap& gradients) override { gradients_ = gradients; }
  void Step() override { ++steps_; }
  const GradientMap& Current() const { return gradients_; }
  int Steps() const { return steps_; }

 private:
  GradientMap gradients_;
  int steps_ = 0;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(AmpScalersOnCuda)

BOOST_AUTO_TEST_CASE(DynamicLossScalerMatchesCpu) {
  const amp::DynamicScalerConfig config{.InitialScale = 1024.0f, .GrowthInterval = 2, .Hysteresis = 1};
  amp::DynamicLossScaler cpu(config);
  amp::DynamicLossScaler gpu(config);
  for (int step = 0; step < 12; ++step) {
    const TensorPtr cpu_loss = cpu.ScaleLoss(Scalar(0.3f));
    const TensorPtr gpu_loss = gpu.ScaleLoss(Scalar(0.3f, DataType::Float32, Device::CUDA(0)));
    BOOST_TEST(Bits(*cpu_loss) == Bits(*gpu_loss), boost::test_tools::per_element());
    const auto cpu_result = cpu.UnscaleGradientsAndCheck(Gradients(step, Device::CPU()));
    const auto gpu_result = gpu.UnscaleGradientsAndCheck(Gradients(step, Device::CUDA(0)));
    BOOST_TEST(cpu_result.Overflow == gpu_result.Overflow);
    CheckSameGradients(cpu_result.Gradients, gpu_result.Gradients);
    BOOST_TEST(cpu.CheckOverflow(Gradients(step, Device::CPU())) ==
               gpu.CheckOverflow(Gradients(step, Device::CUDA(0))));
    cpu.UpdateScale(cpu_result.Overflow);
    gpu.UpdateScale(gpu_result.Overflow);
    BOOST_TEST(cpu.CurrentScale() == gpu.CurrentScale());
    BOOST_TEST((cpu.State() == gpu.State()));
    // The state lives on the GPU (device-side scaling) and its own copy agrees, not only the cache.
    BOOST_TEST_REQUIRE(gpu.DeviceState() != nullptr);
    BOOST_TEST((gpu.DeviceState()->Read() == cpu.State()));
  }
}

BOOST_AUTO_TEST_CASE(RecordedFlowMatchesCpu) {
  const amp::DynamicScalerConfig config{.InitialScale = 1024.0f, .GrowthInterval = 2, .Hysteresis = 2};
  amp::DynamicLossScaler cpu(config);
  amp::DynamicLossScaler gpu(config);
  for (int step = 0; step < 15; ++step) {
    const TensorPtr cpu_loss = cpu.ScaleLoss(Scalar(0.3f));
    const TensorPtr gpu_loss = gpu.ScaleLoss(Scalar(0.3f, DataType::Float32, Device::CUDA(0)));
    BOOST_TEST(Bits(*cpu_loss) == Bits(*gpu_loss), boost::test_tools::per_element());
    CheckSameGradients(cpu.UnscaleAndRecordOverflow(Gradients(step, Device::CPU())),
                       gpu.UnscaleAndRecordOverflow(Gradients(step, Device::CUDA(0))));
    BOOST_TEST(cpu.RecordedOverflow() == gpu.RecordedOverflow());
    cpu.UpdateScaleFromRecord();
    gpu.UpdateScaleFromRecord();
    BOOST_TEST((gpu.DeviceState()->Read() == cpu.State()));
    BOOST_TEST(gpu.DeviceState()->LastStepSkipped() == (step % 5 == 3));
  }
}

BOOST_AUTO_TEST_CASE(GradScalerStepMatchesCpu) {
  const amp::DynamicScalerConfig config{.InitialScale = 4096.0f, .GrowthInterval = 3};
  amp::GradScaler cpu(config);
  amp::GradScaler gpu(config);
  for (int step = 0; step < 10; ++step) {
    RecordingOptimizer cpu_opt(Gradients(step, Device::CPU()));
    RecordingOptimizer gpu_opt(Gradients(step, Device::CUDA(0)));
    cpu.Scale(Scalar(1.0f));
    gpu.Scale(Scalar(1.0f, DataType::Float32, Device::CUDA(0)));
    const bool cpu_stepped = cpu.Step(cpu_opt);
    const bool gpu_stepped = gpu.Step(gpu_opt);
    BOOST_TEST(cpu_stepped == gpu_stepped);
    BOOST_TEST(cpu_opt.Steps() == gpu_opt.Steps());
    CheckSameGradients(cpu_opt.Current(), gpu_opt.Current());
    BOOST_TEST(cpu.CurrentScale() == gpu.CurrentScale());
  }
  BOOST_TEST(cpu.GetStats()->SkippedSteps == gpu.GetStats()->SkippedSteps);
  BOOST_TEST(gpu.GetStats()->SkippedSteps == 2);
}

BOOST_AUTO_TEST_SUITE_END()
