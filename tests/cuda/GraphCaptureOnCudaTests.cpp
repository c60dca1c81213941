// A full training step captured in a CUDA graph and replayed, bit for bit the same as the step run
// eagerly: the scale state's unscale and check of the gradients, the fused Adam step that reads the
// found-inf flag and the step count on the device, and the scale update on the device. The step is
// captured on a framework stream through the library's StreamGuard (the library's stream forks
// from it and joins it again inside the capture), after a warm-up step that uploads what the step
// keeps. One replay sees an Inf in its gradients: the device skips that step (parameters, moments
// and step count stay; the scale backs off) without the host knowing. Needs a CUDA device.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <cuda_runtime_api.h>

#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/backends/cuda/StreamGuard.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>

#include "cuda/CudaTestUtil.hpp"

using namespace mlframework;
using namespace mlframework::optimizers;
using mlfw_cuda_test::Bits;
using mlfw_cuda_test::kGpu;
namespace cuda = mlframework::backends::cuda;

namespace {

void CheckCudaCall(cudaError_t status) { BOOST_REQUIRE_EQUAL(cudaGetErrorName(status), cudaGetErrorName(cudaSuccess)); }

const std::vector<std::size_t> kGraphSizes = {1, 1000, 4097, 70001};

// One model's training state on the GPU, stepped either eagerly or by a graph.
struct Training {
  ScalePolicy policy{.InitialScale = 1024.0f, .GrowthInterval = 2};
  std::unique_ptr<DeviceScaleState> state = cuda::Backend().CreateScaleState(kGpu, policy, ScaleState::Initial(policy));
  std::vector<TensorPtr> w;
  std::vector<TensorPtr> g;
  std::vector<TensorPtr> m;
  std::vector<TensorPtr> v;
  TensorPtr count = Zeros({1}, DataType::Float32, kGpu);
  AdamOptions options = AdamOptions::AdamW(1e-2, 1e-2);

  Training() {
    std::mt19937 rng(41);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const std::size_t n : kGraphSizes) {
      std::vector<float> values(n);
      for (float& x : values) {
        x = normal(rng);
      }
      w.push_back(FromVector(values, {n}, DataType::Float32, kGpu));
      g.push_back(Zeros({n}, DataType::Float32, kGpu));
      m.push_back(Zeros({n}, DataType::Float32, kGpu));
      v.push_back(Zeros({n}, DataType::Float32, kGpu));
    }
  }

  // The step a framework captures: every call queues device work only.
  void Step() {
    (void)cuda::Backend().Write({g, true}, {}, {.State = state.get()});
    BOOST_TEST(FusedAdamStep({.Parameters = w, .Gradients = g, .FirstState = m, .SecondState = v, .StepCount = count},
                             AdamStepScalarsFor(options, 1), state.get()));
    cuda::Backend().UpdateScale(*state);
  }

  // The backward pass of step @p k: scaled gradients written into the same memory each step
  // (an Inf in one element when @p overflow).
  void WriteGradients(int k, bool overflow) {
    std::mt19937 rng(100 + k);
    std::normal_distribution<float> normal(0.0f, 100.0f);
    for (std::size_t t = 0; t < g.size(); ++t) {
      std::vector<float> values(g[t]->Size());
      for (float& x : values) {
        x = normal(rng);
      }
      if (overflow && t == 2) {
        values[values.size() / 2] = std::numeric_limits<float>::infinity();
      }
      g[t]->CopyFromFloats(values);
    }
  }
};

void RequireSameBits(const Training& graphed, const Training& eager) {
  for (std::size_t t = 0; t < kGraphSizes.size(); ++t) {
    BOOST_TEST(Bits(*graphed.w[t]) == Bits(*eager.w[t]));
    BOOST_TEST(Bits(*graphed.m[t]) == Bits(*eager.m[t]));
    BOOST_TEST(Bits(*graphed.v[t]) == Bits(*eager.v[t]));
  }
  BOOST_TEST(Bits(*graphed.count) == Bits(*eager.count));
  const ScaleState a = graphed.state->Read();
  const ScaleState b = eager.state->Read();
  BOOST_TEST(a.Scale == b.Scale);
  BOOST_TEST(a.StepsSinceLastOverflow == b.StepsSinceLastOverflow);
  BOOST_TEST(a.ConsecutiveOverflows == b.ConsecutiveOverflows);
  BOOST_TEST(a.TotalOverflows == b.TotalOverflows);
  BOOST_TEST(a.TotalSteps == b.TotalSteps);
}

// Captures Training::Step() on a framework stream in @p mode, replays it N times and compares
// each replay with an eager step.
void CaptureAndReplay(cudaStreamCaptureMode mode) {
  cudaStream_t stream = nullptr;
  CheckCudaCall(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    const cuda::StreamGuard guard(stream, 0);
    Training eager;
    Training graphed;
    // Warm-up: one eager step of each, which uploads and keeps the step's tables.
    eager.WriteGradients(0, false);
    eager.Step();
    graphed.WriteGradients(0, false);
    graphed.Step();
    RequireSameBits(graphed, eager);

    cudaGraph_t graph = nullptr;
    CheckCudaCall(cudaStreamBeginCapture(stream, mode));
    graphed.Step();
    CheckCudaCall(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    CheckCudaCall(cudaGraphInstantiate(&exec, graph, 0));

    constexpr int kReplays = 6;
    const std::vector<bool> overflows = {false, false, true, false, false, false};
    for (int k = 1; k <= kReplays; ++k) {
      const bool overflow = overflows[static_cast<std::size_t>(k - 1)];
      BOOST_TEST_CONTEXT("replay " << k << (overflow ? " (an Inf in the gradients)" : "")) {
        eager.WriteGradients(k, overflow);
        eager.Step();
        graphed.WriteGradients(k, overflow);
        CheckCudaCall(cudaGraphLaunch(exec, stream));
        CheckCudaCall(cudaStreamSynchronize(stream));
        RequireSameBits(graphed, eager);
      }
    }
    // The skipped replay did not count: 1 warm-up step and 5 replays were taken.
    BOOST_TEST(graphed.count->ToFloatVector() == std::vector<float>{6.0f});
    BOOST_TEST(graphed.state->Read().TotalOverflows == 1);
    CheckCudaCall(cudaGraphExecDestroy(exec));
    CheckCudaCall(cudaGraphDestroy(graph));
  }
  CheckCudaCall(cudaStreamSynchronize(stream));
  CheckCudaCall(cudaStreamDestroy(stream));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaGraphCapture)

// Global mode: any call the runtime deems unsafe during a capture (a synchronisation, a
// cudaMalloc) from any thread invalidates it, so this also proves the step makes none.
BOOST_AUTO_TEST_CASE(AReplayedStepIsBitIdenticalToTheEagerStep) { CaptureAndReplay(cudaStreamCaptureModeGlobal); }

// Relaxed mode, as frameworks that allocate while capturing use it: the same bits.
BOOST_AUTO_TEST_CASE(AReplayedStepCapturedInRelaxedModeIsBitIdentical) {
  CaptureAndReplay(cudaStreamCaptureModeRelaxed);
}

BOOST_AUTO_TEST_SUITE_END()
