// The NCCL process group on the recording drivers (stream order, lifetimes, a dead peer),
// with no GPU and no peer: RecordingNcclDriver records each collective as a kernel on its
// stream, and can play a peer that never comes.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/Float8BlockReduce.hpp>
#include <mlframework/distributed/NcclProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/SGD.hpp>

#include "cuda/StreamOrderHarness.hpp"
#include "mlframework/distributed/Float8BlockReduceDevice.hpp"
#include "mlframework/distributed/RecordingNcclDriver.hpp"

using namespace mlfw_stream_order;
using namespace mlframework::distributed;
// Qualified: another file of the same unity batch brings mlframework::detail into scope.
namespace dist_detail = mlframework::distributed::detail;

namespace {

// Installs a RecordingNcclDriver for its lifetime.
struct RecordedNccl {
  dist_detail::RecordingNcclDriver nccl;
  dist_detail::NcclDriver* previous = dist_detail::InstallNcclDriver(&nccl);
  explicit RecordedNccl(int ranks = 1) : nccl(ranks) {}
  ~RecordedNccl() { dist_detail::InstallNcclDriver(previous); }
  RecordedNccl(const RecordedNccl&) = delete;
  RecordedNccl& operator=(const RecordedNccl&) = delete;
};

std::shared_ptr<IProcessGroup> Group(double timeout_seconds = 60.0, int ranks = 1) {
  NcclProcessGroupOptions options;
  options.Device = 0;
  options.TimeoutSeconds = timeout_seconds;
  return MakeNcclProcessGroup(NcclUniqueId{}, 0, ranks, options);
}

// The framework's forward over FSDP's gathered parameters @p tensors: a kernel on the current
// stream (the StreamGuard's, else stream 0, which the library's blocking stream is ordered with).
void FrameworkRead(const GradientMap& tensors) {
  std::vector<cuda::BufferUse> buffers;
  for (const auto& [name, tensor] : tensors) {
    buffers.push_back(UseOf(tensor, cuda::Use::Read));
  }
  cuda::ActiveDriver().Launch("framework forward", static_cast<cudaStream_t>(cuda::CurrentExternalStream(0)),
                              cuda::KernelOperands{{}, cuda::Access::ReadOnly, buffers}, [] {});
}

// FSDP over the NCCL group of @p ranks recorded ranks on device tensors: two units trained
// through the framework hooks (gathers with the next unit prefetched, a forward reading the
// gathered views, the gradient reductions, the clip's norm agreement and the step).
Flow FsdpTrainingFlow(const fsdp::FSDPConfig& config, int ranks) {
  struct State {
    std::unique_ptr<fsdp::FSDP> model;
    std::unique_ptr<optimizers::SGD> sgd;
    std::vector<GradientMap> gradients;
  };
  auto state = std::make_shared<State>();
  return Flow{.make =
                  [=] {
                    state->model = std::make_unique<fsdp::FSDP>(Group(60.0, ranks), config);
                    for (int u = 0; u < 2; ++u) {
                      const std::string name = "layer" + std::to_string(u);
                      state->model->RegisterUnit(name, {{"w", Zeros({24, 8}, DataType::Float32, kGpu)},
                                                        {"b", Zeros({8}, DataType::Float32, kGpu)}});
                      state->gradients.push_back(
                          {{"w", Zeros({24, 8}, config.ParamDType, kGpu)}, {"b", Zeros({8}, config.ParamDType, kGpu)}});
                    }
                    state->sgd = std::make_unique<optimizers::SGD>(state->model->ShardedParameters(),
                                                                   optimizers::SGDOptions{.LearningRate = 0.01f});
                  },
              .inputs =
                  [=] {
                    std::vector<TensorPtr> all;
                    for (const GradientMap& unit : state->gradients) {
                      for (const auto& [name, tensor] : unit) {
                        all.push_back(tensor);
                      }
                    }
                    return all;
                  },
              .call =
                  [=] {
                    fsdp::FSDP& model = *state->model;
                    for (int step = 0; step < 2; ++step) {
                      for (std::size_t u = 0; u < 2; ++u) {
                        model.PreForward(u);
                        FrameworkRead(model.Unit(u).Parameters());
                        model.PostForward(u);
                      }
                      for (std::size_t u = 2; u-- > 0;) {
                        model.PreBackward(u);
                        FrameworkRead(model.Unit(u).Parameters());
                        model.PostBackward(u, state->gradients[u]);
                      }
                      model.FinishBackward();
                      model.ClipGradNorm(1.0f);
                      model.Step(*state->sgd);
                    }
                  },
              .outputs =
                  [=] {
                    std::vector<TensorPtr> shards;
                    for (std::size_t u = 0; u < 2; ++u) {
                      shards.push_back(state->model->Unit(u).LocalShard());
                    }
                    return shards;
                  }};
}

constexpr const char* kEncode = "FP8 wire encode";
constexpr const char* kDecodeSum = "FP8 wire decode-sum";
constexpr const char* kAllToAllName = "ncclSend/ncclRecv (all-to-all)";
constexpr const char* kAllGatherName = "ncclAllGather";
constexpr const char* kCopy = "cudaMemcpyAsync";

// What the call of @p flow_of's flow queued (kernels by name, collectives, copies), on a
// recording driver of its own, the host having written the inputs before; fails on any
// stream-order violation. The flow's objects go before the driver does.
std::vector<std::string> TraceOf(const std::function<Flow()>& flow_of) {
  Recorded recorded;
  std::vector<std::string> trace;
  {
    Flow flow = flow_of();
    flow.make();
    for (const TensorPtr& input : flow.inputs()) {
      input->CopyFromFloats(std::vector<float>(input->Size(), 1.0f));
    }
    const std::size_t before = recorded.driver.Trace().size();
    flow.call();
    const std::vector<std::string> all = recorded.driver.Trace();
    trace.assign(all.begin() + static_cast<std::ptrdiff_t>(before), all.end());
  }
  const std::vector<std::string> violations = recorded.driver.Violations();
  BOOST_TEST(violations.empty(), "stream-order violations:\n" << Joined(violations));
  return trace;
}

// FSDP's training steps (FsdpTrainingFlow at two ranks) with @p config: what their calls queued.
std::vector<std::string> FsdpStepsTrace(const fsdp::FSDPConfig& config) {
  return TraceOf([config] { return FsdpTrainingFlow(config, 2); });
}

// A flow that runs @p reduce on the two-rank group with a 2 x @p count FP32 device tensor and a
// @p count one.
Flow WireFlow(std::size_t count,
              std::function<void(IProcessGroup&, const TensorPtr& input, const TensorPtr& output)> reduce) {
  auto group = std::make_shared<std::shared_ptr<IProcessGroup>>();
  auto tensors = std::make_shared<std::vector<TensorPtr>>();
  return Flow{.make =
                  [=] {
                    *group = Group(60.0, 2);
                    *tensors = {Zeros({2 * count}, DataType::Float32, kGpu), Zeros({count}, DataType::Float32, kGpu)};
                  },
              .inputs = [=] { return *tensors; },
              .call = [=] { reduce(**group, (*tensors)[0], (*tensors)[1]); },
              .outputs = [=] { return *tensors; }};
}

std::size_t CountOf(const std::vector<std::string>& trace, const std::string& name) {
  return static_cast<std::size_t>(std::count(trace.begin(), trace.end(), name));
}

// The wire's work in @p trace (its kernels and the collectives named @p exchange), in order.
std::vector<std::string> WireWork(const std::vector<std::string>& trace, const std::string& exchange) {
  std::vector<std::string> work;
  for (const std::string& name : trace) {
    if (name == kEncode || name == kDecodeSum || name == exchange) {
      work.push_back(name);
    }
  }
  return work;
}

// @p work is @p pieces repetitions of: encode, the exchange of the codes and of the scales, the
// decoding sum.
void RequirePieces(const std::vector<std::string>& work, const std::string& exchange, std::size_t pieces) {
  std::vector<std::string> expected;
  for (std::size_t p = 0; p < pieces; ++p) {
    expected.insert(expected.end(), {kEncode, exchange, exchange, kDecodeSum});
  }
  BOOST_TEST(work == expected, boost::test_tools::per_element());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(StreamOrderNccl)

// Under a StreamGuard, fails when Wait() orders only the library stream after an asynchronous
// collective (the framework's read of the gathered output races with NCCL).
BOOST_AUTO_TEST_CASE(CollectivesAndAsyncWait) {
  const RecordedNccl nccl;
  RunBoth([] {
    auto group = std::make_shared<std::shared_ptr<IProcessGroup>>();
    auto in = std::make_shared<std::vector<TensorPtr>>();
    auto out = std::make_shared<std::vector<TensorPtr>>();
    return Flow{.make =
                    [=] {
                      *group = Group();
                      *in = List(DataType::Float32, 2);
                      *out = {Zeros({64}, DataType::Float32, kGpu), Zeros({64}, DataType::Float32, kGpu),
                              Zeros({64}, DataType::Float32, kGpu), Zeros({64}, DataType::Float32, kGpu)};
                    },
                .inputs = [=] { return *in; },
                .call =
                    [=] {
                      IProcessGroup& pg = **group;
                      pg.AllReduce(*(*in)[0], ReduceOp::Sum);
                      pg.Broadcast(*(*in)[1], 0);
                      pg.AllGather(*(*in)[0], *(*out)[0]);
                      pg.ReduceScatter(*(*in)[0], *(*out)[1], ReduceOp::Sum);
                      pg.AllToAll(*(*in)[0], *(*out)[3]);  // grouped send/recv: FSDP's FP8 gradient wire
                      pg.Barrier();
                      std::vector<double> values(3, 1.0);
                      pg.AllReduceHost(values, ReduceOp::Sum);
                      const CollectiveRequestPtr gather = pg.AllGatherAsync(*(*in)[0], *(*out)[2]);
                      const CollectiveRequestPtr reduce = pg.AllReduceAsync(*(*in)[1], ReduceOp::Sum);
                      gather->Wait();
                      reduce->Wait();
                    },
                .outputs =
                    [=] {
                      std::vector<TensorPtr> all = *out;
                      all.insert(all.end(), in->begin(), in->end());
                      return all;
                    }};
  });
}

// FSDP itself over the NCCL group on device tensors (FsdpTrainingFlow). Fails on any gathered
// view handed out before its all-gather is ordered before the caller's stream, on a reduction
// that reads gradients the framework stream has not finished writing, and on any buffer freed
// while a collective may still use it.
BOOST_AUTO_TEST_CASE(FsdpTrainingSteps) {
  const RecordedNccl nccl;
  for (const DataType param : {DataType::Float32, DataType::BFloat16}) {
    BOOST_TEST_CONTEXT("parameters in " << ToString(param)) {
      RunBoth([param] { return FsdpTrainingFlow({.ParamDType = param, .ReduceDType = DataType::Float32}, 1); });
    }
  }
}

// The same at two ranks, where the units are sharded and the gradients travel as a real world
// size sends them: reduce-scattered in BF16, or as FP8 blocks through the all-to-all exchange
// (encoded, exchanged and summed on the device). Fails on an encode that reads a gradient before
// the framework has written it, on an exchange of codes before their encode, on a sum of parts
// before they arrived, or on scratch freed while a collective may still use it.
BOOST_AUTO_TEST_CASE(FsdpTrainingStepsAtTwoRanks) {
  const RecordedNccl nccl(2);
  for (const fsdp::GradientWire wire : {fsdp::GradientWire::ReduceDType, fsdp::GradientWire::Float8Blocks}) {
    BOOST_TEST_CONTEXT("gradient wire " << fsdp::ToString(wire)) {
      const int exchanges = nccl.nccl.Count(kAllToAllName);
      RunBoth([wire] {
        return FsdpTrainingFlow({.ParamDType = DataType::BFloat16, .ReduceDType = DataType::BFloat16, .Wire = wire}, 2);
      });
      // The FP8 wire took its own route (the exchange), the BF16 one the reduce-scatter.
      BOOST_TEST((nccl.nccl.Count(kAllToAllName) > exchanges) == (wire == fsdp::GradientWire::Float8Blocks));
    }
  }
}

// The FP8 wire on device tensors runs on the device: each unit's reduction is the encode kernel,
// the all-to-all of the codes and of the scales, and the decoding-sum kernel, in that order, and
// the steps copy nothing more between host and device than the same steps with the BF16
// reduce-scatter (no staging of gradients or shards through the host).
BOOST_AUTO_TEST_CASE(Float8WireStepsRunOnTheDevice) {
  const RecordedNccl nccl(2);
  const std::vector<std::string> bf16 =
      FsdpStepsTrace({.ParamDType = DataType::BFloat16, .ReduceDType = DataType::BFloat16});
  const std::vector<std::string> fp8 = FsdpStepsTrace(
      {.ParamDType = DataType::BFloat16, .ReduceDType = DataType::BFloat16, .Wire = fsdp::GradientWire::Float8Blocks});
  BOOST_TEST(CountOf(bf16, kEncode) == 0u);
  BOOST_TEST(CountOf(fp8, kCopy) == CountOf(bf16, kCopy), Joined(fp8));
  // Two steps of two units, one piece each (the units are small).
  RequirePieces(WireWork(fp8, kAllToAllName), kAllToAllName, 4);
}

// NoShard at two ranks all-reduces each unit's gradients through the wire (as HybridShard does
// across its replicas, Float8BlockAllReduce): encode, the all-gathers of codes and scales, the
// decoding sum, on the device, with no more copies than the FP32 all-reduce's steps.
BOOST_AUTO_TEST_CASE(Float8WireAllReduceRunsOnTheDevice) {
  const RecordedNccl nccl(2);
  const fsdp::FSDPConfig plain{
      .Strategy = fsdp::ShardingStrategy::NoShard, .ParamDType = DataType::BFloat16, .ReduceDType = DataType::Float32};
  fsdp::FSDPConfig wire = plain;
  wire.Wire = fsdp::GradientWire::Float8Blocks;
  const std::vector<std::string> fp32 = FsdpStepsTrace(plain);
  const std::vector<std::string> fp8 = FsdpStepsTrace(wire);
  BOOST_TEST(CountOf(fp8, kCopy) == CountOf(fp32, kCopy), Joined(fp8));
  RequirePieces(WireWork(fp8, kAllGatherName), kAllGatherName, 4);
}

// The reduce-scatter and the all-reduce called directly on the two-rank group, with pieces of
// two blocks over five blocks and a short one: three pieces each, every one in order, no copy.
BOOST_AUTO_TEST_CASE(Float8WirePiecesOnTheDevice) {
  const RecordedNccl nccl(2);
  constexpr std::size_t kCount = (5 * kFloat8WireBlock) + 7;
  constexpr std::size_t kPiece = 2 * kFloat8WireBlock;
  const std::vector<std::string> scatter = TraceOf([] {
    return WireFlow(kCount, [](IProcessGroup& group, const TensorPtr& input, const TensorPtr& output) {
      dist_detail::Float8BlockReduceScatterOnDevice(group, *input, *output, kPiece);
    });
  });
  RequirePieces(scatter, kAllToAllName, 3);
  BOOST_TEST(CountOf(scatter, kCopy) == 0u);
  const std::vector<std::string> reduce = TraceOf([] {
    return WireFlow(kCount, [](IProcessGroup& group, const TensorPtr& /*input*/, const TensorPtr& output) {
      dist_detail::Float8BlockAllReduceOnDevice(group, *output, kPiece);
    });
  });
  RequirePieces(reduce, kAllGatherName, 3);
  BOOST_TEST(CountOf(reduce, kCopy) == 0u);
}

// Bad arguments on device tensors are ArgumentErrors naming the parameter, before any work.
BOOST_AUTO_TEST_CASE(Float8WireBadInputsOnTheDevice) {
  const RecordedNccl nccl(2);
  const Recorded recorded;
  const std::shared_ptr<IProcessGroup> group = Group(60.0, 2);
  const TensorPtr input = Zeros({2 * kFloat8WireBlock}, DataType::Float32, kGpu);
  const TensorPtr output = Zeros({kFloat8WireBlock}, DataType::Float32, kGpu);
  const TensorPtr half = Zeros({kFloat8WireBlock}, DataType::BFloat16, kGpu);
  const TensorPtr short_output = Zeros({kFloat8WireBlock - 1}, DataType::Float32, kGpu);
  const std::size_t launches = recorded.driver.LaunchCount();
  const auto names = [](const std::string& parameter) {
    return [parameter](const ArgumentError& error) { return error.Parameter() == parameter; };
  };
  BOOST_CHECK_EXCEPTION(Float8BlockReduceScatter(*group, *input, *half), ArgumentError, names("output"));
  BOOST_CHECK_EXCEPTION(Float8BlockReduceScatter(*group, *input, *short_output), ArgumentError, names("input"));
  BOOST_CHECK_EXCEPTION(Float8BlockAllReduce(*group, *half), ArgumentError, names("tensor"));
  BOOST_CHECK_EXCEPTION(dist_detail::Float8BlockReduceScatterOnDevice(*group, *input, *output, 100), ArgumentError,
                        names("piece"));
  BOOST_CHECK_EXCEPTION(dist_detail::Float8BlockAllReduceOnDevice(*group, *output, 0), ArgumentError, names("piece"));
  BOOST_TEST(recorded.driver.LaunchCount() == launches);  // nothing queued
}

// FSDP's reductions and gathers are these collectives on device tensors: once warmed up, the
// synchronous device forms queue NCCL work and wait for nothing, so a framework can capture them.
// Fails when the group hands the watchdog an event recorded inside the capture: the collective
// after the region (and the watchdog) would query it, which the runtime refuses
// (cudaErrorCapturedEvent), and the group would abort its communicator. AllReduceHost() (the
// agreements: overflow flags, ClipGradNorm) returns host values and is not capture-safe; neither
// are the asynchronous forms, whose requests the host tests and waits for.
BOOST_AUTO_TEST_CASE(WarmedUpDeviceCollectivesAreCaptureSafe) {
  RecordedNccl nccl;
  Recorded recorded;
  {
    const std::shared_ptr<IProcessGroup> group = Group();
    const TensorPtr in = Zeros({64}, DataType::Float32, kGpu);
    const TensorPtr gathered = Zeros({64}, DataType::Float32, kGpu);
    const TensorPtr reduced = Zeros({64}, DataType::Float32, kGpu);
    auto collectives = [&] {
      group->ReduceScatter(*in, *reduced, ReduceOp::Sum);
      group->AllReduce(*reduced, ReduceOp::Sum);
      group->AllGather(*reduced, *gathered);
      group->Broadcast(*gathered, 0);
    };
    collectives();
    recorded.driver.BeginCapture();
    collectives();
    recorded.driver.EndCapture();
    collectives();  // retires the tracked collectives, as the watchdog does
    group->Barrier();
  }
  RequireOrdered(recorded);
}

// Fails when a free is not ordered after the communication stream: the operands of an
// asynchronous collective go before it was waited for.
BOOST_AUTO_TEST_CASE(OperandsOfAnAsyncCollectiveMayGoBeforeTheWait) {
  RecordedNccl nccl;
  Recorded recorded;
  {
    const std::shared_ptr<IProcessGroup> group = Group();
    TensorPtr in = Zeros({64}, DataType::Float32, kGpu);
    TensorPtr out = Zeros({64}, DataType::Float32, kGpu);
    const CollectiveRequestPtr request = group->AllGatherAsync(*in, *out);
    in.reset();
    out.reset();
    request->Wait();
  }
  RequireOrdered(recorded);
}

// Fails when only the first Wait() orders a stream: a request waited for without a StreamGuard,
// then again under one (another thread's framework stream, or a guard installed since), must
// order that framework stream too before it reads the output.
BOOST_AUTO_TEST_CASE(EachWaitOrdersTheCallersFrameworkStream) {
  RecordedNccl nccl;
  Recorded recorded;
  cudaStream_t framework = nullptr;
  BOOST_REQUIRE(recorded.driver.StreamCreate(&framework, cudaStreamNonBlocking) == cudaSuccess);
  recorded.driver.NameStream(framework, "framework");
  {
    const std::shared_ptr<IProcessGroup> group = Group();
    const TensorPtr in = Zeros({64}, DataType::Float32, kGpu);
    const TensorPtr out = Zeros({64}, DataType::Float32, kGpu);
    const CollectiveRequestPtr request = group->AllGatherAsync(*in, *out);
    request->Wait();
    {
      const cuda::StreamGuard guard(framework, 0);
      request->Wait();
      FrameworkKernel(recorded, framework, {out}, cuda::Use::Read);
    }
    cuda::Synchronize(0);
    BOOST_REQUIRE(recorded.driver.StreamSynchronize(framework) == cudaSuccess);
  }
  RequireOrdered(recorded);
}

// Fails when anything blocks the host before the watchdog knows the collective: the
// all-reduce of host values must end in a CommunicationError after the timeout.
BOOST_AUTO_TEST_CASE(ADeadPeerEndsInACommunicationErrorAfterTheTimeout) {
  RecordedNccl nccl;
  Recorded recorded;
  {
    const std::shared_ptr<IProcessGroup> group = Group(0.2);
    nccl.nccl.DeadPeer();
    std::vector<double> values(4, 1.0);
    const auto start = std::chrono::steady_clock::now();
    BOOST_CHECK_THROW(group->AllReduceHost(values, ReduceOp::Sum), CommunicationError);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    BOOST_TEST(seconds < 10.0);
    BOOST_TEST(nccl.nccl.Aborts() == 1);
  }
  const std::vector<std::string> violations = recorded.driver.Violations();
  BOOST_TEST(violations.empty(), Joined(violations));
}

// Fails when a request whose communicator was aborted reports success (its output is garbage).
BOOST_AUTO_TEST_CASE(ARequestOfAnAbortedCommunicatorFails) {
  RecordedNccl nccl;
  Recorded recorded;
  const std::shared_ptr<IProcessGroup> group = Group(0.2);
  const TensorPtr in = Zeros({64}, DataType::Float32, kGpu);
  const TensorPtr out = Zeros({64}, DataType::Float32, kGpu);
  nccl.nccl.DeadPeer();
  const CollectiveRequestPtr request = group->AllGatherAsync(*in, *out);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (nccl.nccl.Aborts() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the watchdog times the collective out
  }
  BOOST_REQUIRE(nccl.nccl.Aborts() == 1);
  BOOST_CHECK_THROW(request->Test(), CommunicationError);
  BOOST_CHECK_THROW(request->Wait(), CommunicationError);
}

BOOST_AUTO_TEST_SUITE_END()
