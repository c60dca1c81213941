// Stream order of the CUDA backend's entry points, checked on the host: the backend runs on
// the recording driver (backends/cuda/RecordingDriver.hpp), which runs no kernel and fails on
// any access not ordered after the last write on another stream, any free before the last
// use, and any host synchronisation or allocation in a captured region. Each entry point runs
// twice: plain (the host feeds and reads the tensors) and under a StreamGuard, where a
// framework stream writes the inputs before the call and reads the outputs after it.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <dlpack/dlpack.h>
#include <boost/test/unit_test.hpp>

#include <mlframework/c/fp8.h>
#include <mlframework/c/status.h>

#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/backends/cuda/StreamGuard.hpp>
#include <mlframework/core/DLPack.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/Float8Cast.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/optimizers/FusedSteps.hpp>

#include "cuda/StreamOrderHarness.hpp"

using namespace mlframework;
using namespace mlframework::optimizers;
namespace cuda = mlframework::backends::cuda;

using namespace mlfw_stream_order;

BOOST_AUTO_TEST_SUITE(StreamOrderChecker)

BOOST_AUTO_TEST_CASE(FlagsAReadOnAnotherStreamWithoutAnEvent) {
  cuda::RecordingDriver driver;
  cudaStream_t a = nullptr;
  cudaStream_t b = nullptr;
  driver.StreamCreate(&a, 0);
  driver.StreamCreate(&b, 0);
  void* buffer = nullptr;
  driver.Malloc(&buffer, 64);
  const cuda::BufferUse write{buffer, 64, cuda::Use::Write};
  const cuda::BufferUse read{buffer, 64, cuda::Use::Read};
  driver.Launch("writer", a, cuda::KernelOperands{{}, cuda::Access::Writes, {&write, 1}}, [] {});
  driver.Launch("reader", b, cuda::KernelOperands{{}, cuda::Access::ReadOnly, {&read, 1}}, [] {});
  BOOST_TEST(driver.Violations().size() == 1u);
  driver.StreamSynchronize(b);  // the host knows the read is done: a may write again

  cudaEvent_t event = nullptr;
  driver.EventCreate(&event);
  driver.Launch("writer", a, cuda::KernelOperands{{}, cuda::Access::Writes, {&write, 1}}, [] {});
  driver.EventRecord(event, a);
  driver.StreamWaitEvent(b, event);
  driver.Launch("reader", b, cuda::KernelOperands{{}, cuda::Access::ReadOnly, {&read, 1}}, [] {});
  BOOST_TEST(driver.Violations().size() == 1u);  // ordered by the event: nothing new

  // A host synchronisation with a also orders what the host queues next.
  driver.StreamSynchronize(b);
  driver.Launch("writer", a, cuda::KernelOperands{{}, cuda::Access::Writes, {&write, 1}}, [] {});
  driver.StreamSynchronize(a);
  driver.Launch("reader", b, cuda::KernelOperands{{}, cuda::Access::ReadOnly, {&read, 1}}, [] {});
  BOOST_TEST(driver.Violations().size() == 1u);
}

// The legacy default stream waits for the work queued before on blocking streams, and later
// work on a blocking stream waits for it; a non-blocking stream is ordered with neither.
BOOST_AUTO_TEST_CASE(OrdersTheLegacyDefaultStreamWithBlockingStreamsOnly) {
  cuda::RecordingDriver driver;
  cudaStream_t blocking = nullptr;
  cudaStream_t non_blocking = nullptr;
  driver.StreamCreate(&blocking, cudaStreamDefault);
  driver.StreamCreate(&non_blocking, cudaStreamNonBlocking);
  void* buffer = nullptr;
  driver.Malloc(&buffer, 64);
  const cuda::BufferUse write{buffer, 64, cuda::Use::Write};
  const cuda::BufferUse read{buffer, 64, cuda::Use::Read};
  const auto launch = [&](const char* name, cudaStream_t stream, const cuda::BufferUse& use) {
    driver.Launch(name, stream, cuda::KernelOperands{{}, cuda::Access::Writes, {&use, 1}}, [] {});
  };
  launch("writer", blocking, write);
  launch("reader", nullptr, read);  // waits for the blocking stream
  launch("writer", nullptr, write);
  launch("reader", blocking, read);           // waits for stream 0
  launch("writer", cudaStreamLegacy, write);  // cudaStreamLegacy is stream 0
  launch("reader", blocking, read);
  BOOST_TEST(driver.Violations().empty(), Joined(driver.Violations()));
  driver.StreamSynchronize(blocking);  // the host knows the reads are done
  launch("writer", non_blocking, write);
  launch("reader", nullptr, read);  // not ordered after the non-blocking stream
  BOOST_TEST(driver.Violations().size() == 1u);
  driver.StreamSynchronize(non_blocking);
  driver.StreamSynchronize(nullptr);
  launch("writer", nullptr, write);
  launch("reader", non_blocking, read);  // nor the other way round
  BOOST_TEST(driver.Violations().size() == 2u);
}

BOOST_AUTO_TEST_CASE(FlagsAFreeBeforeTheLastUseAndAUseAfterTheFree) {
  cuda::RecordingDriver driver;
  cudaStream_t a = nullptr;
  cudaStream_t b = nullptr;
  driver.StreamCreate(&a, 0);
  driver.StreamCreate(&b, 0);
  void* buffer = nullptr;
  driver.MallocFromPoolAsync(&buffer, 64, nullptr, a);
  const cuda::BufferUse read{buffer, 64, cuda::Use::Read};
  driver.Launch("reader", a, cuda::KernelOperands{{}, cuda::Access::ReadOnly, {&read, 1}}, [] {});
  BOOST_TEST(driver.Violations().empty());
  driver.FreeAsync(buffer, b);  // b never waited for a
  BOOST_TEST(driver.Violations().size() == 1u);
  driver.Launch("reader", a, cuda::KernelOperands{{}, cuda::Access::ReadOnly, {&read, 1}}, [] {});
  BOOST_TEST(driver.Violations().size() == 2u);

  void* owned = nullptr;
  driver.Malloc(&owned, 16);
  const cuda::BufferUse write{owned, 16, cuda::Use::Write};
  driver.Launch("writer", a, cuda::KernelOperands{{}, cuda::Access::Writes, {&write, 1}}, [] {});
  driver.ReleaseOnHost(owned);  // the owner gives the block back while the kernel may run
  BOOST_TEST(driver.Violations().size() == 3u);
}

BOOST_AUTO_TEST_CASE(FlagsHostSynchronisationAndAllocationInACapturedRegion) {
  cuda::RecordingDriver driver;
  cudaStream_t a = nullptr;
  driver.StreamCreate(&a, 0);
  driver.BeginCapture();
  void* buffer = nullptr;
  driver.MallocFromPoolAsync(&buffer, 64, nullptr, a);
  driver.StreamSynchronize(a);
  driver.EndCapture();
  driver.StreamSynchronize(a);
  BOOST_TEST(driver.Violations().size() == 2u, Joined(driver.Violations()));

  // An event recorded inside the region completes only when the graph runs: the host may not
  // query it or wait for it (the runtime's cudaErrorCapturedEvent), until it is recorded again.
  cudaEvent_t event = nullptr;
  driver.EventCreate(&event);
  driver.BeginCapture();
  driver.EventRecord(event, a);
  driver.EndCapture();
  BOOST_TEST(driver.EventQuery(event) == cudaErrorCapturedEvent);
  BOOST_TEST(driver.EventSynchronize(event) == cudaErrorCapturedEvent);
  BOOST_TEST(driver.Violations().size() == 4u, Joined(driver.Violations()));
  driver.EventRecord(event, a);
  BOOST_TEST(driver.EventQuery(event) == cudaSuccess);
  BOOST_TEST(driver.Violations().size() == 4u, Joined(driver.Violations()));

  // A query of any event while a capture runs is an unsafe call, unless the calling thread is in
  // relaxed capture mode (a watchdog thread).
  driver.BeginCapture();
  BOOST_TEST(driver.EventQuery(event) == cudaErrorStreamCaptureUnsupported);
  BOOST_TEST(driver.Violations().size() == 5u, Joined(driver.Violations()));
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  driver.ThreadExchangeStreamCaptureMode(&mode);
  BOOST_TEST(driver.EventQuery(event) == cudaSuccess);
  driver.ThreadExchangeStreamCaptureMode(&mode);
  BOOST_TEST(mode == cudaStreamCaptureModeRelaxed);
  driver.EndCapture();
  BOOST_TEST(driver.Violations().size() == 5u, Joined(driver.Violations()));
}

// A stream that waits for an event recorded in a capture joins it (a fork) and must be joined
// back into the stream it was forked from before the capture ends.
BOOST_AUTO_TEST_CASE(FlagsAStreamForkedIntoACaptureAndNotJoinedBack) {
  cuda::RecordingDriver driver;
  cudaStream_t origin = nullptr;
  cudaStream_t side = nullptr;
  driver.StreamCreate(&origin, cudaStreamNonBlocking);
  driver.StreamCreate(&side, cudaStreamNonBlocking);
  cudaEvent_t fork = nullptr;
  cudaEvent_t join = nullptr;
  driver.EventCreate(&fork);
  driver.EventCreate(&join);
  for (const bool joined : {true, false}) {
    driver.BeginCapture();
    driver.EventRecord(fork, origin);
    driver.StreamWaitEvent(side, fork);
    driver.EventRecord(join, side);  // the side stream's captured work
    if (joined) {
      driver.StreamWaitEvent(origin, join);
    }
    driver.EndCapture();
    BOOST_TEST(driver.Violations().size() == (joined ? 0u : 1u), Joined(driver.Violations()));
  }
  BOOST_TEST(driver.Violations().back().find("not joined back") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(StreamOrderEntryPoints)

BOOST_AUTO_TEST_CASE(BackendListOperations) {
  RunBoth([] {
    auto lists = std::make_shared<std::vector<TensorPtr>>();
    auto outs = std::make_shared<std::vector<TensorPtr>>();
    return Flow{.make =
                    [=] {
                      *lists = List(DataType::Float32);
                      *outs = List(DataType::BFloat16);
                    },
                .inputs = [=] { return *lists; },
                .call =
                    [=] {
                      BOOST_TEST(!UnscaleAndCheck(*lists, 0.5f));
                      BOOST_TEST(!HasNonFinite(*lists));
                      static_cast<void>(CheckAndSumSquares(*lists, 1.0f));
                      ScaleInPlace(*lists, 2.0f);
                      static_cast<void>(CastInto(*lists, *outs, 1.0f));
                      AddInto(*lists, *lists, 1.0f);
                      static_cast<void>(UnscaleCheckAndAmax(*lists, 0.5f));
                    },
                .outputs =
                    [=] {
                      std::vector<TensorPtr> all = *lists;
                      all.insert(all.end(), outs->begin(), outs->end());
                      return all;
                    }};
  });
}

BOOST_AUTO_TEST_CASE(ScalerDeviceFlows) {
  RunBoth([] {
    auto grads = std::make_shared<std::vector<TensorPtr>>();
    auto outs = std::make_shared<std::vector<TensorPtr>>();
    auto flag = std::make_shared<TensorPtr>();
    return Flow{
        .make =
            [=] {
              *grads = List(DataType::Float16);
              *outs = List(DataType::Float32);
            },
        .inputs = [=] { return *grads; },
        .call =
            [=] {
              const ScalePolicy policy;
              const std::unique_ptr<DeviceScaleState> state =
                  cuda::Backend().CreateScaleState(kGpu, policy, ScaleState::Initial(policy));
              const std::vector<TensorPtr>& src = *grads;
              const std::vector<TensorPtr>& dst = *outs;
              (void)cuda::Backend().Read({src, true}, {.State = state.get()});
              (void)cuda::Backend().Write({src, true}, {dst, true}, {.Op = WriteOp::Cast, .State = state.get()});
              (void)cuda::Backend().Write({dst, true}, {}, {.State = state.get()});
              state->FlagToTensor(*flag);
              cuda::Backend().UpdateScale(*state);
              state->ClearAmax();
              static_cast<void>(state->Read());
            },
        .outputs =
            [=] {
              std::vector<TensorPtr> all = *outs;
              all.push_back(*flag);
              return all;
            }};
  });
}

// Fails when the fused steps do not join the framework's stream (the step reads gradients the
// framework wrote, and the framework reads the parameters the step wrote). With a step count on
// the device, the step reads it and a kernel after the step moves it on under the found-inf flag
// (the framework reads the counts after the steps).
BOOST_AUTO_TEST_CASE(FusedOptimizerSteps) {
  RunBoth([] {
    auto w = std::make_shared<std::vector<TensorPtr>>();
    auto g = std::make_shared<std::vector<TensorPtr>>();
    auto m = std::make_shared<std::vector<TensorPtr>>();
    auto v = std::make_shared<std::vector<TensorPtr>>();
    auto low = std::make_shared<std::vector<TensorPtr>>();
    auto counts = std::make_shared<std::vector<TensorPtr>>();
    return Flow{
        .make =
            [=] {
              *w = List(DataType::Float32);
              *g = List(DataType::Float32);
              *m = List(DataType::Float32);
              *v = List(DataType::Float32);
              *low = List(DataType::BFloat16);
              *counts = {Zeros({1}, DataType::Float32, kGpu), Zeros({1}, DataType::Float32, kGpu)};
            },
        .inputs = [=] { return *g; },
        .call =
            [=] {
              BOOST_TEST(FusedAdamStep(
                  {.Parameters = *w, .Gradients = *g, .FirstState = *m, .SecondState = *v, .LowPrecisionCopies = *low},
                  AdamStepScalarsFor(AdamOptions{}, 1)));
              BOOST_TEST(FusedSGDStep({.Parameters = *w, .Gradients = *g, .FirstState = *m},
                                      SGDStepScalarsFor({.LearningRate = 0.01f, .Momentum = 0.9f}, true)));
              const ScalePolicy policy;
              const std::unique_ptr<DeviceScaleState> state =
                  cuda::Backend().CreateScaleState(kGpu, policy, ScaleState::Initial(policy));
              BOOST_TEST(FusedAdamStep(
                  {.Parameters = *w, .Gradients = *g, .FirstState = *m, .SecondState = *v, .StepCount = (*counts)[0]},
                  AdamStepScalarsFor(AdamOptions{}, 1), state.get()));
              BOOST_TEST(FusedSGDStep({.Parameters = *w, .Gradients = *g, .FirstState = *m, .StepCount = (*counts)[1]},
                                      SGDStepScalarsFor({.Momentum = 0.9}, false), state.get()));
            },
        .outputs =
            [=] {
              std::vector<TensorPtr> all = *w;
              all.insert(all.end(), low->begin(), low->end());
              all.insert(all.end(), counts->begin(), counts->end());
              return all;
            }};
  });
}

// The low-bit fused steps (LowBitSteps.cu): every master, remainder, state and block-scale buffer
// the framework wrote before the step is read by the step only after that write, and the
// framework reads them only after the step wrote them; the device step count likewise.
BOOST_AUTO_TEST_CASE(LowBitFusedOptimizerSteps) {
  RunBoth([] {
    auto w = std::make_shared<std::vector<TensorPtr>>();
    auto rem = std::make_shared<std::vector<TensorPtr>>();
    auto w32 = std::make_shared<std::vector<TensorPtr>>();
    auto g = std::make_shared<std::vector<TensorPtr>>();
    auto m = std::make_shared<std::vector<TensorPtr>>();
    auto v = std::make_shared<std::vector<TensorPtr>>();
    auto m_scales = std::make_shared<std::vector<TensorPtr>>();
    auto v_scales = std::make_shared<std::vector<TensorPtr>>();
    auto b = std::make_shared<std::vector<TensorPtr>>();
    auto low = std::make_shared<std::vector<TensorPtr>>();
    auto counts = std::make_shared<std::vector<TensorPtr>>();
    return Flow{.make =
                    [=] {
                      *w = List(DataType::BFloat16);
                      *rem = List(DataType::BFloat16);
                      *w32 = List(DataType::Float32);
                      *g = List(DataType::Float32);
                      *m = List(DataType::Float8E4M3FN);
                      *v = List(DataType::Float8E4M3FN);
                      *b = List(DataType::BFloat16);
                      *low = List(DataType::BFloat16);
                      for (std::size_t i = 0; i < 3; ++i) {  // List(): 64 * (i + 1) elements, blocks of 32
                        m_scales->push_back(Zeros({2 * (i + 1)}, DataType::Float32, kGpu));
                        v_scales->push_back(Zeros({2 * (i + 1)}, DataType::Float32, kGpu));
                      }
                      *counts = {Zeros({1}, DataType::Float32, kGpu)};
                    },
                .inputs =
                    [=] {
                      std::vector<TensorPtr> all = *g;
                      for (const auto* list : {&*w, &*rem, &*w32, &*m, &*v, &*m_scales, &*v_scales, &*b}) {
                        all.insert(all.end(), list->begin(), list->end());
                      }
                      return all;
                    },
                .call =
                    [=] {
                      BOOST_TEST(FusedAdamStep({.Parameters = *w,
                                                .Gradients = *g,
                                                .FirstState = *m,
                                                .SecondState = *v,
                                                .FirstStateFormat = StateFormat::Int8Block,
                                                .SecondStateFormat = StateFormat::UInt8Block,
                                                .FirstStateScales = *m_scales,
                                                .SecondStateScales = *v_scales,
                                                .StateBlockSize = 32,
                                                .Masters = MasterFormat::BFloat16Remainder,
                                                .ParameterRemainders = *rem},
                                               AdamStepScalarsFor(AdamOptions{}, 1)));
                      BOOST_TEST(FusedAdamStep({.Parameters = *w32,
                                                .Gradients = *g,
                                                .FirstState = *m,
                                                .SecondState = *v,
                                                .LowPrecisionCopies = *low,
                                                .FirstStateFormat = StateFormat::Float8E4M3Block,
                                                .SecondStateFormat = StateFormat::Float8E4M3Block,
                                                .FirstStateScales = *m_scales,
                                                .SecondStateScales = *v_scales,
                                                .StateBlockSize = 32},
                                               AdamStepScalarsFor(AdamOptions{}, 2)));
                      const ScalePolicy policy;
                      const std::unique_ptr<DeviceScaleState> state =
                          cuda::Backend().CreateScaleState(kGpu, policy, ScaleState::Initial(policy));
                      BOOST_TEST(FusedSGDStep({.Parameters = *w,
                                               .Gradients = *g,
                                               .FirstState = *b,
                                               .StepCount = (*counts)[0],
                                               .FirstStateFormat = StateFormat::BFloat16,
                                               .Masters = MasterFormat::BFloat16StochasticRounding},
                                              SGDStepScalarsFor({.Momentum = 0.9}, false), state.get()));
                    },
                .outputs =
                    [=] {
                      std::vector<TensorPtr> all = *counts;
                      for (const auto* list : {&*w, &*rem, &*w32, &*m, &*v, &*m_scales, &*v_scales, &*b, &*low}) {
                        all.insert(all.end(), list->begin(), list->end());
                      }
                      return all;
                    }};
  });
}

// Fails when the low-bit step leaves a buffer it writes out of its launch's operands: after the
// step, a kernel on a stream the step's stream is not joined with reads each buffer, which the
// checker must flag exactly for the buffers the step wrote (everything before the step is made
// known to the host first, so only the step's own writes can be unordered).
BOOST_AUTO_TEST_CASE(TheLowBitStepsDeclareEveryBufferTheyWrite) {
  Recorded recorded;
  cudaStream_t other = nullptr;
  BOOST_REQUIRE(recorded.driver.StreamCreate(&other, cudaStreamNonBlocking) == cudaSuccess);
  {
    const std::vector<TensorPtr> w = List(DataType::BFloat16);
    const std::vector<TensorPtr> rem = List(DataType::BFloat16);
    const std::vector<TensorPtr> w32 = List(DataType::Float32);
    const std::vector<TensorPtr> low = List(DataType::Float16);
    const std::vector<TensorPtr> g = List(DataType::Float32);
    const std::vector<TensorPtr> m = List(DataType::Float8E4M3FN);
    const std::vector<TensorPtr> v = List(DataType::Float8E4M3FN);
    std::vector<TensorPtr> m_scales;
    std::vector<TensorPtr> v_scales;
    for (std::size_t i = 0; i < 3; ++i) {  // List(): 64 * (i + 1) elements, blocks of 32
      m_scales.push_back(Zeros({2 * (i + 1)}, DataType::Float32, kGpu));
      v_scales.push_back(Zeros({2 * (i + 1)}, DataType::Float32, kGpu));
    }
    const TensorPtr count = Zeros({1}, DataType::Float32, kGpu);
    cuda::Synchronize(0);
    const auto read_elsewhere = [&](const std::vector<TensorPtr>& list, bool written) {
      for (const TensorPtr& tensor : list) {
        const std::size_t before = recorded.driver.Violations().size();
        const cuda::BufferUse read = UseOf(tensor, cuda::Use::Read);
        recorded.driver.Launch("reader", other, cuda::KernelOperands{{}, cuda::Access::ReadOnly, {&read, 1}}, [] {});
        BOOST_TEST(recorded.driver.Violations().size() == before + (written ? 1u : 0u));
      }
    };
    BOOST_TEST(FusedAdamStep({.Parameters = w,
                              .Gradients = g,
                              .FirstState = m,
                              .SecondState = v,
                              .StepCount = count,
                              .FirstStateFormat = StateFormat::Int8Block,
                              .SecondStateFormat = StateFormat::UInt8Block,
                              .FirstStateScales = m_scales,
                              .SecondStateScales = v_scales,
                              .StateBlockSize = 32,
                              .Masters = MasterFormat::BFloat16Remainder,
                              .ParameterRemainders = rem},
                             AdamStepScalarsFor(AdamOptions{}, 1)));
    for (const std::vector<TensorPtr>* list : {&w, &rem, &m, &v, &std::as_const(m_scales), &std::as_const(v_scales)}) {
      read_elsewhere(*list, true);
    }
    read_elsewhere({count}, true);
    read_elsewhere(g, false);
    cuda::Synchronize(0);
    BOOST_TEST(FusedSGDStep({.Parameters = w32,
                             .Gradients = g,
                             .FirstState = m,
                             .LowPrecisionCopies = low,
                             .FirstStateFormat = StateFormat::Float8E4M3Block,
                             .FirstStateScales = m_scales,
                             .StateBlockSize = 32},
                            SGDStepScalarsFor({.Momentum = 0.9}, false)));
    for (const std::vector<TensorPtr>* list : {&w32, &low, &m, &std::as_const(m_scales)}) {
      read_elsewhere(*list, true);
    }
    read_elsewhere(v_scales, false);
    cuda::Synchronize(0);
  }
  BOOST_TEST(recorded.driver.LaunchCount() > 0);
}

// Fails when a warmed-up fused step allocates or waits for the host (its table uploaded from
// pageable memory into new device memory on every call): it could not be captured in a graph.
BOOST_AUTO_TEST_CASE(AWarmedUpFusedStepIsCaptureSafe) {
  Recorded recorded;
  {
    const std::vector<TensorPtr> w = List(DataType::Float32);
    const std::vector<TensorPtr> g = List(DataType::Float32);
    const std::vector<TensorPtr> m = List(DataType::Float32);
    const std::vector<TensorPtr> v = List(DataType::Float32);
    const OptimizerStepLists lists{.Parameters = w, .Gradients = g, .FirstState = m, .SecondState = v};
    BOOST_TEST(FusedAdamStep(lists, AdamStepScalarsFor(AdamOptions{}, 1)));
    recorded.driver.BeginCapture();
    BOOST_TEST(FusedAdamStep(lists, AdamStepScalarsFor(AdamOptions{}, 2)));
    recorded.driver.EndCapture();
  }
  RequireOrdered(recorded);
}

BOOST_AUTO_TEST_CASE(Float8Casts) {
  RunBoth([] {
    auto src = std::make_shared<std::vector<TensorPtr>>();
    auto fp8 = std::make_shared<std::vector<TensorPtr>>();
    auto back = std::make_shared<std::vector<TensorPtr>>();
    auto scale = std::make_shared<TensorPtr>();
    auto amax = std::make_shared<TensorPtr>();
    return Flow{.make =
                    [=] {
                      *src = List(DataType::BFloat16, 2);
                      *fp8 = List(DataType::Float8E4M3FN, 2);
                      *back = List(DataType::Float32, 2);
                      *scale = Zeros({2}, DataType::Float32, kGpu);
                      *amax = Zeros({2}, DataType::Float32, kGpu);
                    },
                .inputs =
                    [=] {
                      std::vector<TensorPtr> all = *src;
                      all.push_back(*scale);
                      return all;
                    },
                .call =
                    [=] {
                      ScaledCastToFloat8(*src, *fp8, *scale, *amax);
                      DequantizeFloat8(*fp8, *back, *scale);
                      Amax(*src, *amax);
                    },
                .outputs =
                    [=] {
                      std::vector<TensorPtr> all = *back;
                      all.push_back(*amax);
                      return all;
                    }};
  });
}

// The C API's recipe orders the update of its CUDA state on the caller's stream whatever the
// order its tensors were registered in: fails when a CPU tensor registered after a CUDA one
// leaves the recipe knowing only the CPU, which refuses the stream.
BOOST_AUTO_TEST_CASE(CApiRecipeUpdatesItsCudaStateOnTheCallersStream) {
  Recorded recorded;
  cudaStream_t framework = nullptr;
  BOOST_REQUIRE(recorded.driver.StreamCreate(&framework, cudaStreamNonBlocking) == cudaSuccess);
  recorded.driver.NameStream(framework, "framework");
  {
    DLManagedTensor* gpu = ToDLPack(Zeros({64}, DataType::Float32, kGpu));
    DLManagedTensor* cpu = ToDLPack(Zeros({64}, DataType::Float32));
    mlfw_delayed_scaling_config config{};
    BOOST_REQUIRE(mlfw_delayed_scaling_config_default(&config) == MLFW_STATUS_OK);
    mlfw_fp8_recipe_t recipe = nullptr;
    BOOST_REQUIRE(mlfw_delayed_scaling_create(&config, &recipe) == MLFW_STATUS_OK);
    BOOST_REQUIRE(mlfw_fp8_recipe_register(recipe, "w", MLFW_FP8_FORWARD, &gpu->dl_tensor) == MLFW_STATUS_OK);
    BOOST_REQUIRE(mlfw_fp8_recipe_register(recipe, "host", MLFW_FP8_FORWARD, &cpu->dl_tensor) == MLFW_STATUS_OK);
    const mlfw_status status = mlfw_fp8_recipe_update_scales(recipe, framework);
    BOOST_TEST(status == MLFW_STATUS_OK, "mlfw_fp8_recipe_update_scales: " << mlfw_last_error());
    mlfw_fp8_recipe_destroy(recipe);
    gpu->deleter(gpu);
    cpu->deleter(cpu);
  }
  RequireOrdered(recorded);
}

// One stream belongs to one device: a recipe with state on two CUDA devices refuses it, naming
// it (NULL still updates both). Fails when the stream is taken for the last device registered.
BOOST_AUTO_TEST_CASE(CApiRecipeRefusesOneStreamForTwoDevices) {
  struct TwoDevices {
    cuda::RecordingDriver driver{2};
    cuda::Driver* previous = cuda::InstallDriver(&driver);
    TwoDevices() = default;
    ~TwoDevices() { cuda::InstallDriver(previous); }
    TwoDevices(const TwoDevices&) = delete;
    TwoDevices& operator=(const TwoDevices&) = delete;
  } recorded;
  cudaStream_t framework = nullptr;
  BOOST_REQUIRE(recorded.driver.StreamCreate(&framework, cudaStreamNonBlocking) == cudaSuccess);
  {
    DLManagedTensor* first = ToDLPack(Zeros({64}, DataType::Float32, Device::CUDA(0)));
    DLManagedTensor* second = ToDLPack(Zeros({64}, DataType::Float32, Device::CUDA(1)));
    mlfw_delayed_scaling_config config{};
    BOOST_REQUIRE(mlfw_delayed_scaling_config_default(&config) == MLFW_STATUS_OK);
    mlfw_fp8_recipe_t recipe = nullptr;
    BOOST_REQUIRE(mlfw_delayed_scaling_create(&config, &recipe) == MLFW_STATUS_OK);
    BOOST_REQUIRE(mlfw_fp8_recipe_register(recipe, "a", MLFW_FP8_FORWARD, &first->dl_tensor) == MLFW_STATUS_OK);
    BOOST_REQUIRE(mlfw_fp8_recipe_register(recipe, "b", MLFW_FP8_FORWARD, &second->dl_tensor) == MLFW_STATUS_OK);
    BOOST_TEST(mlfw_fp8_recipe_update_scales(recipe, framework) == MLFW_STATUS_INVALID_ARGUMENT);
    const std::string message = mlfw_last_error();
    BOOST_TEST_MESSAGE(message);
    BOOST_TEST(message.find("'stream'") != std::string::npos, message);
    BOOST_TEST(message.find("CUDA devices 0 and 1") != std::string::npos, message);
    BOOST_TEST(mlfw_fp8_recipe_update_scales(recipe, nullptr) == MLFW_STATUS_OK, mlfw_last_error());
    mlfw_fp8_recipe_destroy(recipe);
    first->deleter(first);
    second->deleter(second);
  }
  const std::vector<std::string> violations = recorded.driver.Violations();
  BOOST_TEST(violations.empty(), "stream-order violations:\n" << Joined(violations));
}

// Fails when the owner of wrapped memory is released as soon as the last tensor goes: its
// allocator could hand the block out while the queued kernel still writes it.
BOOST_AUTO_TEST_CASE(WrappedMemoryGoesBackAfterTheQueuedWork) {
  Recorded recorded;
  void* memory = nullptr;
  BOOST_REQUIRE(recorded.driver.Malloc(&memory, 256 * sizeof(float)) == cudaSuccess);
  {
    std::shared_ptr<void> owner(memory, [&recorded](void* block) { recorded.driver.ReleaseOnHost(block); });
    const std::vector<TensorPtr> wrapped{cuda::Wrap(memory, {256}, DataType::Float32, 0, owner)};
    owner.reset();
    ScaleInPlace(wrapped, 2.0f);
  }
  RequireOrdered(recorded);
}

// The same through DLPack: fails when FromDLPack's tensor calls the producer's deleter (a
// framework's allocator taking the block back) before the kernel queued on the memory has run.
BOOST_AUTO_TEST_CASE(DLPackMemoryGoesBackAfterTheQueuedWork) {
  Recorded recorded;
  struct Producer {
    cuda::RecordingDriver* driver;
    void* memory;
    std::int64_t shape[1] = {256};
    bool deleted = false;
  } producer{&recorded.driver, nullptr};
  BOOST_REQUIRE(recorded.driver.Malloc(&producer.memory, 256 * sizeof(float)) == cudaSuccess);
  DLManagedTensor managed{};
  managed.dl_tensor.data = producer.memory;
  managed.dl_tensor.device = {kDLCUDA, 0};
  managed.dl_tensor.ndim = 1;
  managed.dl_tensor.dtype = {kDLFloat, 32, 1};
  managed.dl_tensor.shape = producer.shape;
  managed.manager_ctx = &producer;
  managed.deleter = [](DLManagedTensor* self) {
    auto* owner = static_cast<Producer*>(self->manager_ctx);
    owner->driver->ReleaseOnHost(owner->memory);
    owner->deleted = true;
  };
  {
    const std::vector<TensorPtr> imported{FromDLPack(&managed)};
    ScaleInPlace(imported, 2.0f);
  }
  cuda::Synchronize(0);  // the deferred release runs once the queued work is known to be done
  BOOST_TEST(producer.deleted);
  RequireOrdered(recorded);
}

// The other direction: memory the library exports (ToDLPack; the C API's scaled loss) is read
// by the receiver on its stream, and frameworks call the deleter when the host drops their
// tensor, with those reads possibly still queued and without a StreamGuard. Fails when the
// library's stream-ordered pool takes the block back (cudaFreeAsync on the library stream)
// before the work queued on the stream that was current at the export, up to the deleter call.
BOOST_AUTO_TEST_CASE(ExportedMemoryGoesBackAfterTheReceiversStream) {
  Recorded recorded;
  cudaStream_t framework = nullptr;
  BOOST_REQUIRE(recorded.driver.StreamCreate(&framework, cudaStreamNonBlocking) == cudaSuccess);
  recorded.driver.NameStream(framework, "framework");
  DLManagedTensor* exported = nullptr;
  {
    const cuda::StreamGuard guard(framework, 0);
    const std::vector<TensorPtr> result{Zeros({256}, DataType::Float32, kGpu)};
    ScaleInPlace(result, 2.0f);
    exported = ToDLPack(result[0]);
  }
  // The receiver's kernel reads the exported tensor on its stream; the host then drops it.
  const cuda::BufferUse read{exported->dl_tensor.data, 256 * sizeof(float), cuda::Use::Read};
  recorded.driver.Launch("framework kernel", framework, cuda::KernelOperands{{}, cuda::Access::ReadOnly, {&read, 1}},
                         [] {});
  exported->deleter(exported);
  // The next allocation may be handed the same block and written on the library stream.
  const std::vector<TensorPtr> next{Zeros({256}, DataType::Float32, kGpu)};
  ScaleInPlace(next, 3.0f);
  RequireOrdered(recorded);
}

// The receiver drops the exported tensor while its stream captures a CUDA graph (its host code
// runs during the capture). Fails when the deleter forks the library stream into the capture
// (its wait for the receiver's stream, never joined back), or frees there, or when the memory
// does not go back after the capture, ordered after the receiver's stream.
BOOST_AUTO_TEST_CASE(AnExportDroppedInsideACaptureGoesBackAfterIt) {
  Recorded recorded;
  cudaStream_t framework = nullptr;
  BOOST_REQUIRE(recorded.driver.StreamCreate(&framework, cudaStreamNonBlocking) == cudaSuccess);
  recorded.driver.NameStream(framework, "framework");
  DLManagedTensor* exported = nullptr;
  {
    const cuda::StreamGuard guard(framework, 0);
    const std::vector<TensorPtr> result{Zeros({256}, DataType::Float32, kGpu)};
    ScaleInPlace(result, 2.0f);
    exported = ToDLPack(result[0]);
  }
  const void* memory = exported->dl_tensor.data;
  const cuda::BufferUse read{exported->dl_tensor.data, 256 * sizeof(float), cuda::Use::Read};
  recorded.driver.Launch("framework kernel", framework, cuda::KernelOperands{{}, cuda::Access::ReadOnly, {&read, 1}},
                         [] {});
  recorded.driver.BeginCapture();
  recorded.driver.Launch("captured framework kernel", framework, cuda::KernelOperands{}, [] {});
  exported->deleter(exported);
  recorded.driver.EndCapture();
  cuda::Synchronize(0);  // releases what went during the capture
  BOOST_TEST(!recorded.driver.Live(memory));
  const std::vector<TensorPtr> next{Zeros({256}, DataType::Float32, kGpu)};
  ScaleInPlace(next, 3.0f);
  RequireOrdered(recorded);
}

BOOST_AUTO_TEST_SUITE_END()
