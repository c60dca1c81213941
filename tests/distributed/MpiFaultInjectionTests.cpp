// MPI failures injected through MPI's profiling interface: this executable defines MPI calls
// that the library's calls reach instead of MPI's own; they fail when a test arms them and
// otherwise pass the call on to the PMPI_ entry point. Each test fails the call on every rank
// alike, as a failing MPI would, and checks that the engine is left as it was: the failed call
// throws CommunicationError, its tensor is unchanged, and the collectives after it complete
// with the bits of the blocking calls. A collective that hangs ends the process through
// WaitWithin() (and the suite has a CTest timeout): an engine with a stuck operation cannot
// shut down, so the test could not fail any other way.
#include <mpi.h>

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/CollectiveRequest.hpp>
#include <mlframework/distributed/MpiProcessGroup.hpp>

#include "distributed/DistributedTestUtil.hpp"

namespace dist = mlframework::distributed;
using mlframework::DataType;
using mlframework::TensorPtr;

namespace {

// How many of the next MPI_Ialltoallv calls fail (with MPI_ERR_OTHER, starting nothing).
std::atomic<int> failing_alltoallv{0};

// Returns once @p request completed; ends the process with a message naming @p what when it
// has not after kDeadline.
void WaitWithin(dist::CollectiveRequest& request, const char* what) {
  constexpr auto kDeadline = std::chrono::seconds(20);
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (!request.Test()) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::cerr << "MpiFaultInjection: " << what << " did not complete within " << kDeadline.count() << " s\n";
      std::_Exit(EXIT_FAILURE);
    }
    std::this_thread::yield();
  }
}

}  // namespace

extern "C" int MPI_Ialltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                              void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                              MPI_Comm comm, MPI_Request* request) {
  int armed = failing_alltoallv.load();
  while (armed > 0) {
    if (failing_alltoallv.compare_exchange_weak(armed, armed - 1)) return MPI_ERR_OTHER;
  }
  return PMPI_Ialltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request);
}

BOOST_AUTO_TEST_SUITE(MpiFaultInjection)

// The all-to-all all-reduce (the default method) starts its all-gather on the engine's second
// communicator in the order the operations were started: a first stage that fails to start
// must hold no place in that order, or every later all-reduce, deferred all-gather and
// reduce-scatter with a finish waits for it forever.
BOOST_AUTO_TEST_CASE(AFailedAllReduceStartLeavesTheLaterCollectivesRunning) {
  auto group = dist::MakeMpiProcessGroup();
  const int rank = group->Rank();
  const auto world = static_cast<std::size_t>(group->WorldSize());
  const auto me = static_cast<std::size_t>(rank);
  constexpr std::size_t kCount = 1001;
  auto tensor = mlfw_test::Make(mlfw_test::RankValues(kCount, rank, 0.2f), DataType::Float32);
  const std::vector<float> before = tensor->ToFloatVector();

  failing_alltoallv.store(1);
  BOOST_CHECK_THROW(group->AllReduceAsync(*tensor), mlframework::CommunicationError);
  BOOST_TEST(failing_alltoallv.load() == 0);  // the all-to-all was the call that failed
  BOOST_TEST(mlfw_test::SameBits(tensor->ToFloatVector(), before));

  // An all-reduce, a deferred all-gather and a reduce-scatter with a finish, all in flight
  // together: each gets the bits of its blocking twin.
  TensorPtr expected_sum = tensor->Clone();
  group->AllReduce(*expected_sum);
  auto sum = group->AllReduceAsync(*tensor);

  auto gathered = mlframework::Zeros({kCount * world});
  const TensorPtr slot = gathered->Backend()->View(gathered, kCount * me, {kCount});
  auto gather = group->AllGatherAsyncAfter([&slot, &before] { slot->CopyFromFloats(before); }, *slot, *gathered);

  auto scatter_input = mlfw_test::Make(mlfw_test::RankValues(kCount * world, rank, 0.6f), DataType::BFloat16);
  auto scattered = mlframework::Zeros({kCount}, DataType::BFloat16);
  int finishes = 0;
  auto scatter =
      group->ReduceScatterAsyncThen(*scatter_input, *scattered, dist::ReduceOp::Sum, [&finishes] { ++finishes; });

  WaitWithin(*sum, "the all-reduce after the failed one");
  WaitWithin(*gather, "the deferred all-gather after the failed all-reduce");
  WaitWithin(*scatter, "the reduce-scatter with a finish after the failed all-reduce");

  BOOST_TEST(mlfw_test::SameBits(tensor->ToFloatVector(), expected_sum->ToFloatVector()));
  auto expected_gathered = mlframework::Zeros({kCount * world});
  const TensorPtr expected_slot = expected_gathered->Backend()->View(expected_gathered, kCount * me, {kCount});
  expected_slot->CopyFromFloats(before);
  group->AllGather(*expected_slot, *expected_gathered);
  BOOST_TEST(mlfw_test::SameBits(gathered->ToFloatVector(), expected_gathered->ToFloatVector()));
  auto expected_scattered = mlframework::Zeros({kCount}, DataType::BFloat16);
  group->ReduceScatter(*scatter_input, *expected_scattered);
  BOOST_TEST(mlfw_test::SameBits(scattered->ToFloatVector(), expected_scattered->ToFloatVector()));
  BOOST_TEST(finishes == 1);
}

BOOST_AUTO_TEST_SUITE_END()
