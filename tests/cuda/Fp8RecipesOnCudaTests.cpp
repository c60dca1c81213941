// The FP8 recipes' state on a GPU: DelayedScaling's fused update kernel (one block per scale,
// the history rolled in place) gives the CPU backend's scales and histories bit for bit,
// histories longer than one block of threads included. Needs a CUDA device.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Tensor.hpp>
#include <mlframework/fp8/DelayedScaling.hpp>

#include "cuda/CudaTestUtil.hpp"

using namespace mlframework;
using namespace mlframework::fp8;
using mlfw_cuda_test::kGpu;

namespace {

// Spelled out: GCC 12 warns (-Wrestrict, a false positive) on "t" + std::to_string(t) here.
const std::string kNames[] = {"t0", "t1", "t2", "t3", "t4"};

void Record(DelayedScaling& recipe, const std::string& name, float amax) {
  const std::vector<float> value{amax};
  recipe.Amax(name)->CopyFromFloats(value);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaFp8Recipes)

BOOST_AUTO_TEST_CASE(DelayedScalingOnTheGpuMatchesTheCpu) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::size_t history : {std::size_t{1}, std::size_t{7}, std::size_t{300}}) {
    for (const auto algo : {AmaxComputeAlgorithm::Max, AmaxComputeAlgorithm::MostRecent}) {
      const DelayedScalingConfig config{
          .Margin = 1, .Fp8Format = Format::HYBRID, .AmaxHistoryLen = history, .AmaxComputeAlgo = algo};
      DelayedScaling cpu(config);
      DelayedScaling gpu(config);
      for (int t = 0; t < 5; ++t) {
        const std::string& name = kNames[t];
        const TensorRole role = t % 2 == 0 ? TensorRole::Forward : TensorRole::Gradient;
        cpu.Register(name, role, *Zeros({1}));
        gpu.Register(name, role, *Zeros({1}, DataType::Float32, kGpu));
      }
      BOOST_TEST(gpu.Scale("t0")->GetDevice() == kGpu);
      for (int step = 0; step < 40; ++step) {
        for (int t = 0; t < 5; ++t) {
          const std::string& name = kNames[t];
          float amax = std::ldexp(1.0f + 0.1f * static_cast<float>((step * 7 + t) % 9), (step % 11) - 5);
          if ((step + t) % 13 == 0) amax = 0.0f;
          if ((step + t) % 17 == 0) amax = inf;
          if ((step + t) % 19 == 0) amax = nan;
          Record(cpu, name, amax);
          Record(gpu, name, amax);
        }
        cpu.UpdateScales();
        gpu.UpdateScales();
      }
      for (const std::string& name : kNames) {
        BOOST_TEST((mlfw_cuda_test::Bits(*gpu.Scale(name)) == mlfw_cuda_test::Bits(*cpu.Scale(name))));
        BOOST_TEST((mlfw_cuda_test::Bits(*gpu.ScaleInv(name)) == mlfw_cuda_test::Bits(*cpu.ScaleInv(name))));
        BOOST_TEST((gpu.AmaxHistory(name).size() == history));
      }
      BOOST_TEST((gpu.StateDict() == cpu.StateDict()));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
