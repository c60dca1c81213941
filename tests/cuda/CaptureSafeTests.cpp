// The capture rule on the device flows a framework replays as a CUDA graph: after a warm-up
// call, each flow runs on the recording driver (backends/cuda/RecordingDriver.hpp) inside a
// region marked as captured, where a host synchronisation or an allocation is a violation, and
// every access must still be ordered. The flows: the GradScaler's (unscale into the device flag,
// a fused step that reads the flag and the step count on the device, the scale update on the
// device), the GradientConversionLayer's device flow, and the FP8 recipes' scale update.

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/amp/GradScaler.hpp>
#include <mlframework/backends/cuda/StreamGuard.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/fp8/CurrentScaling.hpp>
#include <mlframework/fp8/DelayedScaling.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>

#include "cuda/StreamOrderHarness.hpp"

using namespace mlframework;
using namespace mlframework::optimizers;
namespace cuda = mlframework::backends::cuda;

using namespace mlfw_stream_order;

namespace {

// A flow: before() runs outside the captured region, captured() inside it.
struct CaptureFlow {
  std::function<void()> before = [] {};
  std::function<void()> captured;
};

// Runs @p flow once to warm up, then again with its captured part inside a captured region (and
// under a StreamGuard when @p guarded, the way a framework captures on its own stream), and fails
// on any violation.
void RequireCaptureSafe(const std::function<CaptureFlow()>& make_flow, bool guarded) {
  Recorded recorded;
  cudaStream_t framework = nullptr;
  BOOST_REQUIRE(recorded.driver.StreamCreate(&framework, cudaStreamNonBlocking) == cudaSuccess);
  recorded.driver.NameStream(framework, "framework");
  {
    const CaptureFlow flow = make_flow();
    std::optional<cuda::StreamGuard> guard;
    if (guarded) {
      guard.emplace(framework, 0);
    }
    flow.before();
    flow.captured();
    flow.before();
    const std::size_t launches = recorded.driver.LaunchCount();
    recorded.driver.BeginCapture();
    flow.captured();
    recorded.driver.EndCapture();
    BOOST_TEST(recorded.driver.LaunchCount() > launches);  // the captured call queued its kernels
  }
  RequireOrdered(recorded);
}

void RequireCaptureSafe(const std::function<CaptureFlow()>& make_flow) {
  BOOST_TEST_CONTEXT("without a StreamGuard") { RequireCaptureSafe(make_flow, false); }
  BOOST_TEST_CONTEXT("under a StreamGuard") { RequireCaptureSafe(make_flow, true); }
}

// An Adam step's FP32 state on the device with its step count, stepped over @p gradients with
// the found-inf flag of @p state read on the device.
struct CountedAdam {
  std::vector<TensorPtr> w = List(DataType::Float32);
  std::vector<TensorPtr> m = List(DataType::Float32);
  std::vector<TensorPtr> v = List(DataType::Float32);
  TensorPtr count = Zeros({1}, DataType::Float32, kGpu);

  void Step(const std::vector<TensorPtr>& gradients, const DeviceScaleState* state) const {
    BOOST_TEST(
        FusedAdamStep({.Parameters = w, .Gradients = gradients, .FirstState = m, .SecondState = v, .StepCount = count},
                      AdamStepScalarsFor(AdamOptions{}, 1), state));
  }
};

// The FP32 gradients of @p fp32 and the FP16 ones of @p half, each under its own name.
GradientMap Named(const std::vector<TensorPtr>& fp32, const std::vector<TensorPtr>& half) {
  GradientMap map;
  for (const std::vector<TensorPtr>* list : {&fp32, &half}) {
    for (const TensorPtr& tensor : *list) {
      std::string name = "p";
      name += std::to_string(map.size());
      map[name] = tensor;
    }
  }
  return map;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(StreamOrderCapture)

// The scale state's operations on the backend (DeviceScalingBackend), as a framework captures them.
BOOST_AUTO_TEST_CASE(TheScaleStatesDeviceOperationsAreCaptureSafe) {
  RequireCaptureSafe([] {
    struct Step {
      ScalePolicy policy;
      std::unique_ptr<DeviceScaleState> state =
          cuda::Backend().CreateScaleState(kGpu, policy, ScaleState::Initial(policy));
      std::vector<TensorPtr> half = List(DataType::Float16);
      std::vector<TensorPtr> master = List(DataType::Float32);
      TensorPtr flag;
    };
    auto step = std::make_shared<Step>();
    return CaptureFlow{.captured = [step] {
      const std::vector<TensorPtr>& src = step->half;
      const std::vector<TensorPtr>& dst = step->master;
      const DeviceScalingBackend& backend = cuda::Backend();
      step->state->ClearFoundInf();
      step->state->ClearAmax();
      (void)backend.Read({src, true}, {.State = step->state.get()});
      (void)backend.Write({src, true}, {dst, true}, {.Op = WriteOp::Cast, .State = step->state.get()});
      (void)backend.Write({dst, true}, {}, {.State = step->state.get()});
      step->state->FlagToTensor(step->flag);  // the flag a framework all-reduces
      step->state->FlagFromTensor(*step->flag);
      step->state->MarkFoundInf();
      backend.UpdateScale(*step->state);
    }};
  });
}

// Unscale (into the device flag), the fused Adam step reading the flag and
// the step count on the device, and the scale update on the device: the manual flow of a graphed
// step. Scale(loss) returns a new tensor, so it runs before the captured region.
BOOST_AUTO_TEST_CASE(TheGradScalersDeviceFlowIsCaptureSafe) {
  RequireCaptureSafe([] {
    struct Step {
      amp::GradScaler scaler;
      CountedAdam adam;
      std::vector<TensorPtr> g = List(DataType::Float32);
      // FP32 gradients unscaled in place, FP16 ones into the FP32 tensors the scaler keeps.
      GradientMap gradients = Named(g, List(DataType::Float16));
      TensorPtr loss = Zeros({1}, DataType::Float32, kGpu);
    };
    auto step = std::make_shared<Step>();
    return CaptureFlow{.before = [step] { static_cast<void>(step->scaler.Scale(step->loss)); },
                       .captured =
                           [step] {
                             static_cast<void>(step->scaler.Unscale(step->gradients));
                             auto& dynamic = dynamic_cast<amp::DynamicLossScaler&>(*step->scaler.Scaler());
                             step->adam.Step(step->g, dynamic.DeviceState());
                             step->scaler.Update();
                           }};
  });
}

// The conversion layer's device flow through its scaler: ProcessGradients() returns ShouldSkip, a
// host bool, so a captured step takes the calls it makes on the device instead: clear the
// record, unscale (FP16 into kept FP32 buffers, FP32 in place) into the device flag, step with
// the flag, update the scale from the record on the device.
BOOST_AUTO_TEST_CASE(TheConversionLayersDeviceFlowIsCaptureSafe) {
  RequireCaptureSafe([] {
    struct Step {
      mixed_precision::GradientConversionLayer layer;
      std::vector<TensorPtr> half = List(DataType::Float16);
      std::vector<TensorPtr> master = List(DataType::Float32);
      CountedAdam adam;
    };
    auto step = std::make_shared<Step>();
    step->layer.LossScaler()->MoveStateTo(step->half);  // the one copy of the state onto the device
    return CaptureFlow{.captured = [step] {
      mixed_precision::DynamicLossScaler& scaler = *step->layer.LossScaler();
      scaler.ClearRecordedOverflow();
      scaler.UnscaleAndRecordOverflow({}, step->half, step->master);
      step->adam.Step(step->master, scaler.DeviceState());
      scaler.UpdateScaleFromRecord();
    }};
  });
}

// Quantize (the casts recording the amax), Dequantize and the scale update.
BOOST_AUTO_TEST_CASE(TheFloat8RecipesScaleUpdateIsCaptureSafe) {
  for (const bool delayed : {true, false}) {
    BOOST_TEST_CONTEXT((delayed ? "DelayedScaling" : "CurrentScaling")) {
      RequireCaptureSafe([delayed] {
        struct Step {
          std::unique_ptr<fp8::IScalingRecipe> recipe;
          std::vector<std::string> names{"a", "b"};
          std::vector<TensorPtr> src = List(DataType::BFloat16, 2);
          std::vector<TensorPtr> dst = List(DataType::Float8E4M3FN, 2);
          std::vector<TensorPtr> back = List(DataType::BFloat16, 2);
        };
        auto step = std::make_shared<Step>();
        if (delayed) {
          step->recipe = std::make_unique<fp8::DelayedScaling>();
        } else {
          step->recipe = std::make_unique<fp8::CurrentScaling>();
        }
        for (std::size_t i = 0; i < step->names.size(); ++i) {
          step->recipe->Register(step->names[i], fp8::TensorRole::Forward, *step->src[i]);
        }
        return CaptureFlow{.captured = [step] {
          step->recipe->Quantize(step->names, step->src, step->dst);
          step->recipe->Dequantize(step->names, step->dst, step->back);
          step->recipe->UpdateScales();
        }};
      });
    }
  }
}

// Fails when a tensor dropped inside a captured region frees its memory there (a graph's free
// node may free only memory a graph allocated; under a StreamGuard, the free's wait for the
// framework stream would also fork the library stream into the capture with no join back), when
// a wrapped tensor's owner waits for an event recorded there (never queryable: the owner would
// never go), or when either is not released after the capture, with the frees ordered after
// the work queued before.
BOOST_AUTO_TEST_CASE(TensorsDroppedInsideACaptureAreReleasedAfterIt) {
  for (const bool guarded : {false, true}) {
    BOOST_TEST_CONTEXT((guarded ? "under a StreamGuard" : "without a StreamGuard")) {
      Recorded recorded;
      cudaStream_t framework = nullptr;
      BOOST_REQUIRE(recorded.driver.StreamCreate(&framework, cudaStreamNonBlocking) == cudaSuccess);
      recorded.driver.NameStream(framework, "framework");
      // Without a guard the framework computes on the legacy default stream.
      cudaStream_t reader = guarded ? framework : nullptr;
      bool released = false;
      const void* pooled = nullptr;
      {
        std::optional<cuda::StreamGuard> guard;
        if (guarded) {
          guard.emplace(framework, 0);
        }
        void* block = nullptr;
        BOOST_REQUIRE(recorded.driver.Malloc(&block, 64 * sizeof(float)) == cudaSuccess);
        TensorPtr wrapped = cuda::Wrap(block, {64}, DataType::Float32, 0, std::shared_ptr<void>(block, [&](void* p) {
                                         recorded.driver.ReleaseOnHost(p);
                                         released = true;
                                       }));
        TensorPtr dropped = Zeros({64}, DataType::Float32, kGpu);
        pooled = cuda::DevicePointer(*dropped);
        // The framework's kernels use the library's tensor (its own memory it orders itself),
        // the library reads both.
        FrameworkKernel(recorded, reader, {dropped}, cuda::Use::Write);
        std::vector<TensorPtr> both{wrapped, dropped};
        (void)cuda::Backend().Read({both, true}, {});
        FrameworkKernel(recorded, reader, {dropped}, cuda::Use::Read);
        recorded.driver.BeginCapture();
        both.clear();
        wrapped.reset();
        dropped.reset();
        recorded.driver.EndCapture();
        cuda::Synchronize(0);  // releases what went during the capture
      }
      BOOST_TEST(released);
      BOOST_TEST(!recorded.driver.Live(pooled));
      RequireOrdered(recorded);
    }
  }
}

// A recipe with tensors on the GPU and on the host: UpdateScales() keeps a copy of the states
// updated before the last device's (so a failing device leaves every state as it was) without
// allocating after the warm-up.
BOOST_AUTO_TEST_CASE(TheScaleUpdateOfARecipeOnTwoDevicesIsCaptureSafe) {
  RequireCaptureSafe([] {
    struct Step {
      fp8::DelayedScaling recipe;
      std::vector<TensorPtr> src = List(DataType::BFloat16, 1);
      std::vector<TensorPtr> dst = List(DataType::Float8E4M3FN, 1);
    };
    auto step = std::make_shared<Step>();
    step->recipe.Register("gpu", fp8::TensorRole::Forward, *step->src[0]);
    step->recipe.Register("host", fp8::TensorRole::Forward, *Zeros({4}));
    return CaptureFlow{.captured = [step] {
      step->recipe.Quantize(std::vector<std::string>{"gpu"}, step->src, step->dst);
      step->recipe.UpdateScales();
    }};
  });
}

// What the capture-safe flows above replace: calls that return a host bool read the device flag,
// a host synchronisation the checker flags inside a captured region (docs/cuda-backend.md).
BOOST_AUTO_TEST_CASE(CallsThatReturnTheOverflowToTheHostAreNotCaptureSafe) {
  Recorded recorded;
  {
    mixed_precision::GradientConversionLayer layer;
    const std::vector<TensorPtr> half = List(DataType::Float16);
    GradientMap gradients;
    gradients["a"] = half[0];
    static_cast<void>(layer.ProcessGradients(gradients));
    recorded.driver.BeginCapture();
    static_cast<void>(layer.ProcessGradients(gradients));
    recorded.driver.EndCapture();
  }
  const std::vector<std::string> violations = recorded.driver.Violations();
  BOOST_TEST(!violations.empty());
  for (const std::string& violation : violations) {
    BOOST_TEST(violation.find("host synchronisation inside a captured region") != std::string::npos, violation);
  }
}

BOOST_AUTO_TEST_SUITE_END()
