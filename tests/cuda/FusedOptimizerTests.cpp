// The CUDA backend's fused Adam/AdamW and SGD (TensorBackend::AdamStep / SGDStep through
// optimizers/FusedSteps.hpp): the same bits as the CPU backend's AVX2 kernels (torch's vectorised
// arithmetic, fused multiply-adds included, and the IEEE root; CMake runs this suite with
// MLFW_CPU_ISA=avx2) over lists of odd sizes and several steps, the FP16/BF16 copies,
// and the step skipped on the device when the scale state's found-inf flag is set. Needs a CUDA device.
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>

#include "cuda/CudaTestUtil.hpp"

using namespace mlframework;
using namespace mlframework::optimizers;
using mlfw_cuda_test::Bits;
using mlfw_cuda_test::HostRoundsAsTheDevice;
using mlfw_cuda_test::kGpu;
namespace cuda = mlframework::backends::cuda;

namespace {

const std::vector<std::size_t> kSizes = {1, 5, 16, 1000, 4095, 4097, 70001};

// The same values on the host and on the GPU, one list each.
struct Lists {
  std::vector<TensorPtr> host;
  std::vector<TensorPtr> gpu;
};

Lists Make(std::mt19937& rng, float scale, DataType dtype = DataType::Float32) {
  std::normal_distribution<float> normal(0.0f, scale);
  Lists lists;
  for (const std::size_t n : kSizes) {
    std::vector<float> v(n);
    for (float& x : v) {
      x = normal(rng);
    }
    lists.host.push_back(FromVector(v, {n}, dtype));
    lists.gpu.push_back(FromVector(v, {n}, dtype, kGpu));
  }
  return lists;
}

void RequireSameBits(const Lists& lists) {
  for (std::size_t t = 0; t < lists.host.size(); ++t) {
    BOOST_TEST(Bits(*lists.gpu[t]) == Bits(*lists.host[t]));
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaFusedOptimizers)

BOOST_AUTO_TEST_CASE(AdamWAndSGDMatchTheCpuKernelsBitForBit) {
  if (!HostRoundsAsTheDevice()) {
    return;
  }
  std::mt19937 rng(17);
  const Lists w = Make(rng, 1.0f);
  const Lists m = Make(rng, 0.0f);
  const Lists v = Make(rng, 0.0f);
  const Lists b = Make(rng, 0.0f);
  const Lists copies = Make(rng, 0.0f, DataType::BFloat16);
  const AdamOptions adam = AdamOptions::AdamW(3e-3f, 5e-2f);
  for (std::int64_t step = 1; step <= 4; ++step) {
    const Lists g = Make(rng, 0.1f);
    for (const bool on_gpu : {false, true}) {
      auto pick = [&](const Lists& l) -> const std::vector<TensorPtr>& { return on_gpu ? l.gpu : l.host; };
      BOOST_TEST(FusedAdamStep({.Parameters = pick(w),
                                .Gradients = pick(g),
                                .FirstState = pick(m),
                                .SecondState = pick(v),
                                .LowPrecisionCopies = pick(copies)},
                               AdamStepScalarsFor(adam, step)));
      BOOST_TEST(
          FusedSGDStep({.Parameters = pick(w), .Gradients = pick(g), .FirstState = pick(b)},
                       SGDStepScalarsFor({.LearningRate = 0.01f, .Momentum = 0.9f, .Nesterov = true}, step == 1)));
    }
    RequireSameBits(w);
    RequireSameBits(m);
    RequireSameBits(v);
    RequireSameBits(b);
    RequireSameBits(copies);
  }
}

BOOST_AUTO_TEST_CASE(TheDeviceFlagSkipsTheStepWithoutTheHost) {
  std::mt19937 rng(19);
  const Lists w = Make(rng, 1.0f);
  const Lists g = Make(rng, 0.1f);
  const Lists m = Make(rng, 0.0f);
  const Lists v = Make(rng, 0.0f);
  const ScalePolicy policy;
  const std::unique_ptr<DeviceScaleState> state =
      cuda::Backend().CreateScaleState(kGpu, policy, ScaleState::Initial(policy));
  state->MarkFoundInf();
  const OptimizerStepLists lists{.Parameters = w.gpu, .Gradients = g.gpu, .FirstState = m.gpu, .SecondState = v.gpu};
  BOOST_TEST(FusedAdamStep(lists, AdamStepScalarsFor(AdamOptions{}, 1), state.get()));  // queued
  RequireSameBits(w);  // the host copies never stepped: the device skipped
  if (!HostRoundsAsTheDevice()) {
    return;
  }
  state->ClearFoundInf();
  BOOST_TEST(FusedAdamStep(lists, AdamStepScalarsFor(AdamOptions{}, 1), state.get()));
  BOOST_TEST(FusedAdamStep({.Parameters = w.host, .Gradients = g.host, .FirstState = m.host, .SecondState = v.host},
                           AdamStepScalarsFor(AdamOptions{}, 1)));
  RequireSameBits(w);
  RequireSameBits(m);
  RequireSameBits(v);
}

// The step count on the device: a step skipped for the device flag does not count, so the bias
// correction of the next step is right without the host knowing which steps the device skipped.
// Compared with the same lists stepped with the steps the host counted.
BOOST_AUTO_TEST_CASE(TheDeviceStepCountCountsOnlyTheStepsTaken) {
  std::mt19937 counted_rng(23);
  std::mt19937 reference_rng(23);
  const Lists w = Make(counted_rng, 1.0f);
  const Lists m = Make(counted_rng, 0.0f);
  const Lists v = Make(counted_rng, 0.0f);
  const Lists ref_w = Make(reference_rng, 1.0f);
  const Lists ref_m = Make(reference_rng, 0.0f);
  const Lists ref_v = Make(reference_rng, 0.0f);
  const TensorPtr count = Zeros({1}, DataType::Float32, kGpu);
  const ScalePolicy policy;
  const std::unique_ptr<DeviceScaleState> state =
      cuda::Backend().CreateScaleState(kGpu, policy, ScaleState::Initial(policy));
  const AdamOptions adam = AdamOptions::AdamW(3e-3, 5e-2);
  std::mt19937 rng(29);
  std::int64_t taken = 0;
  for (const bool overflow : {true, false, true, false, false}) {
    const Lists g = Make(rng, 0.1f);
    overflow ? state->MarkFoundInf() : state->ClearFoundInf();
    BOOST_TEST(FusedAdamStep(
        {.Parameters = w.gpu, .Gradients = g.gpu, .FirstState = m.gpu, .SecondState = v.gpu, .StepCount = count},
        AdamStepScalarsFor(adam, 1), state.get()));
    if (!overflow) {
      ++taken;
      BOOST_TEST(FusedAdamStep(
          {.Parameters = ref_w.gpu, .Gradients = g.gpu, .FirstState = ref_m.gpu, .SecondState = ref_v.gpu},
          AdamStepScalarsFor(adam, taken)));
    }
    BOOST_TEST(count->ToFloatVector() == std::vector<float>{static_cast<float>(taken)});
    for (std::size_t t = 0; t < kSizes.size(); ++t) {
      BOOST_TEST(Bits(*w.gpu[t]) == Bits(*ref_w.gpu[t]));
      BOOST_TEST(Bits(*m.gpu[t]) == Bits(*ref_m.gpu[t]));
      BOOST_TEST(Bits(*v.gpu[t]) == Bits(*ref_v.gpu[t]));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
