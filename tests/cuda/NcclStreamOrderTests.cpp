// The NCCL process group on the recording drivers (stream order, lifetimes, a dead peer),
// with no GPU and no peer: RecordingNcclDriver records each collective as a kernel on its
// stream, and can play a peer that never comes.

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/NcclProcessGroup.hpp>

#include "cuda/StreamOrderHarness.hpp"
#include "mlframework/distributed/RecordingNcclDriver.hpp"

using namespace mlfw_stream_order;
using namespace mlframework::distributed;

namespace {

// Installs a RecordingNcclDriver for its lifetime.
struct RecordedNccl {
  detail::RecordingNcclDriver nccl;
  detail::NcclDriver* previous = detail::InstallNcclDriver(&nccl);
  RecordedNccl() = default;
  ~RecordedNccl() { detail::InstallNcclDriver(previous); }
  RecordedNccl(const RecordedNccl&) = delete;
  RecordedNccl& operator=(const RecordedNccl&) = delete;
};

std::shared_ptr<IProcessGroup> Group(double timeout_seconds = 60.0) {
  NcclProcessGroupOptions options;
  options.Device = 0;
  options.TimeoutSeconds = timeout_seconds;
  return MakeNcclProcessGroup(NcclUniqueId{}, 0, 1, options);
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
                              Zeros({64}, DataType::Float32, kGpu)};
                    },
                .inputs = [=] { return *in; },
                .call =
                    [=] {
                      IProcessGroup& pg = **group;
                      pg.AllReduce(*(*in)[0], ReduceOp::Sum);
                      pg.Broadcast(*(*in)[1], 0);
                      pg.AllGather(*(*in)[0], *(*out)[0]);
                      pg.ReduceScatter(*(*in)[0], *(*out)[1], ReduceOp::Sum);
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
