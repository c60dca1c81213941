// The two-pass gradient pipeline (GradientConversionLayer) on CUDA gradients
// gives what it gives on CPU gradients: the same skip decisions and scale, the
// same FP32 gradients (bit for bit without clipping; within the sum-of-squares
// tolerance with clipping, whose coefficient comes from the norm). Needs a CUDA device.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Tensor.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>

using namespace mlframework;
using namespace mlframework::optimizers::mixed_precision;

namespace {

GradientMap PipelineGradients(int step, Device device) {
  std::vector<float> w(1000);
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = 2048.0f * std::sin(static_cast<float>(i + 1) * 0.37f + static_cast<float>(step));
  }
  if (step == 2) {
    w[17] = std::numeric_limits<float>::quiet_NaN();
  }
  return {{"w", FromVector(w, {10, 100}, DataType::Float16, device)},
          {"b", FromVector({300.0f, -600.0f, 5.0f}, {3}, DataType::BFloat16, device)}};
}

void Compare(const GradientMap& cpu, const GradientMap& gpu, double tolerance) {
  BOOST_TEST_REQUIRE(cpu.size() == gpu.size());
  for (const auto& [name, tensor] : cpu) {
    const std::vector<float> a = tensor->ToFloatVector();
    const std::vector<float> b = gpu.at(name)->ToFloatVector();
    BOOST_TEST(gpu.at(name)->GetDevice().IsCUDA());
    BOOST_TEST((gpu.at(name)->GetDataType() == DataType::Float32));
    BOOST_TEST_REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (tolerance == 0.0) {
        BOOST_TEST(std::bit_cast<std::uint32_t>(a[i]) == std::bit_cast<std::uint32_t>(b[i]),
                   name << "[" << i << "] " << a[i] << " vs " << b[i]);
      } else {
        BOOST_TEST(std::fabs(a[i] - b[i]) <= tolerance * std::fabs(a[i]) + 1e-30, name << "[" << i << "]");
      }
    }
  }
}

void RunPipeline(bool clipping) {
  MixedPrecisionOptions options = MixedPrecisionOptions::ForFP16();
  options.InitialLossScale = 1024.0f;
  options.GrowthInterval = 2;
  options.EnableGradientClipping = clipping;
  options.MaxGradNorm = 0.5f;
  GradientConversionLayer cpu(options);
  GradientConversionLayer gpu(options);
  for (int step = 0; step < 6; ++step) {
    const GradientProcessingResult a = cpu.ProcessGradients(PipelineGradients(step, Device::CPU()));
    const GradientProcessingResult b = gpu.ProcessGradients(PipelineGradients(step, Device::CUDA(0)));
    BOOST_TEST(a.ShouldSkip == b.ShouldSkip);
    BOOST_TEST(a.ShouldSkip == (step == 2));
    BOOST_TEST(cpu.CurrentScale() == gpu.CurrentScale());
    BOOST_TEST(cpu.ClipCount() == gpu.ClipCount());
    BOOST_TEST(std::fabs(cpu.LastGradientNorm() - gpu.LastGradientNorm()) <= 1e-5f * cpu.LastGradientNorm());
    Compare(a.Gradients, b.Gradients, clipping ? 1e-5 : 0.0);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(GradientPipelineOnCuda)

BOOST_AUTO_TEST_CASE(WithoutClippingBitIdenticalToCpu) { RunPipeline(false); }

BOOST_AUTO_TEST_CASE(WithClippingWithinNormTolerance) { RunPipeline(true); }

BOOST_AUTO_TEST_SUITE_END()
