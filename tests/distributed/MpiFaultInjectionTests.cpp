// MPI failures injected through MPI's profiling interface: this executable defines MPI calls
// that the library's calls reach instead of MPI's own; they fail when a test arms them and
// otherwise pass the call on to the PMPI_ entry point. The same way it replaces the global
// operator new (an armed thread's k-th allocation fails) and defines pthread_create (an armed
// call fails with EAGAIN). Each test fails a call on every rank alike, as a failing MPI or a
// full machine would: an operation whose call failed throws, and the collectives in flight with
// it and after it complete with the bits of the blocking calls. A collective that hangs ends the
// process through WaitWithin() (and the suite has a CTest timeout): an engine with a stuck
// operation cannot shut down, so the test could not fail any other way.
#include <dlfcn.h>
#include <mpi.h>
#include <pthread.h>

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
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
// How many of the next MPI_Ialltoallv requests to record: the first as `held_request`, whose
// MPI_Test reports it incomplete until `failing_request` failed; the second as
// `failing_request`, whose MPI_Test reports MPI_ERR_OTHER once the request completed.
std::atomic<int> recording_alltoallv{0};
std::atomic<MPI_Request> held_request{MPI_REQUEST_NULL};
std::atomic<MPI_Request> failing_request{MPI_REQUEST_NULL};

constexpr auto kDeadline = std::chrono::seconds(20);

// Returns once @p request completed; ends the process with a message naming @p what when it
// has not after kDeadline.
void WaitWithin(dist::CollectiveRequest& request, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (!request.Test()) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::cerr << "MpiFaultInjection: " << what << " did not complete within " << kDeadline.count() << " s\n";
      std::_Exit(EXIT_FAILURE);
    }
    std::this_thread::yield();
  }
}

// Ends the process with a message naming @p what when @p request's Wait() has not returned after
// the same deadline (Wait() itself cannot be given one).
void WaitWithinByWait(dist::CollectiveRequest& request, const char* what) {
  std::mutex mutex;
  std::condition_variable returned;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lock(mutex);
    if (!returned.wait_for(lock, kDeadline, [&done] { return done; })) {
      std::cerr << "MpiFaultInjection: " << what << " did not complete within " << kDeadline.count() << " s\n";
      std::_Exit(EXIT_FAILURE);
    }
  });
  request.Wait();
  {
    const std::lock_guard lock(mutex);
    done = true;
  }
  returned.notify_one();
  watchdog.join();
}

// The allocation failure: while `allocations_until_failure` is positive, this thread's
// allocations count it down and the one that reaches zero fails (and sets `allocation_failed`).
thread_local long allocations_until_failure = 0;
thread_local bool allocation_failed = false;

// How many allocations of threads other than `sparing_thread` still fail (the engine's progress
// thread, whose allocations a test cannot arm from its own thread).
std::atomic<long> failing_other_allocations{0};
std::atomic<std::thread::id> sparing_thread{};

// True when the armed allocation is this one (which then fails).
bool FailsNow() noexcept {
  long others = failing_other_allocations.load();
  while (others > 0 && std::this_thread::get_id() != sparing_thread.load()) {
    if (failing_other_allocations.compare_exchange_weak(others, others - 1)) return true;
  }
  if (allocations_until_failure <= 0 || --allocations_until_failure > 0) return false;
  allocation_failed = true;
  return true;
}

// Fails this thread's @p k-th allocation from now on (k > 0).
void FailAllocation(long k) noexcept {
  allocations_until_failure = k;
  allocation_failed = false;
}

// Disarms the allocation failure; true when the armed allocation failed.
bool StopFailingAllocations() noexcept {
  allocations_until_failure = 0;
  return allocation_failed;
}

void* Allocate(std::size_t bytes) {
  if (FailsNow()) throw std::bad_alloc();
  if (void* memory = std::malloc(bytes == 0 ? 1 : bytes)) return memory;
  throw std::bad_alloc();
}

void* AllocateAligned(std::size_t bytes, std::align_val_t alignment) {
  if (FailsNow()) throw std::bad_alloc();
  const auto align = static_cast<std::size_t>(alignment);
  // aligned_alloc wants a multiple of the alignment.
  if (void* memory = std::aligned_alloc(align, (bytes + align - 1) / align * align + (bytes == 0 ? align : 0))) {
    return memory;
  }
  throw std::bad_alloc();
}

// How many of this thread's next pthread_create calls fail (with EAGAIN, starting nothing): the
// engine starts its thread on the thread that submits, and no other thread's start is failed.
thread_local int failing_thread_starts = 0;
// pthread_create calls made by this thread.
thread_local int thread_starts_here = 0;

// True when the engine starts a progress thread (MLFW_MPI_PROGRESS_THREAD=0 turns it off).
bool ProgressThreadOn() {
  const char* text = std::getenv("MLFW_MPI_PROGRESS_THREAD");
  return text == nullptr || std::string(text) != "0";
}

// Stops the job with a message: the ranks disagree on whether a collective started, so the next
// collective on that group would pair different calls across ranks (and could hang or corrupt).
void RequireAgreement(dist::IProcessGroup& referee, bool started) {
  auto flag = mlframework::Zeros({1});
  flag->CopyFromFloats(std::vector<float>{started ? 1.0f : 0.0f});
  referee.AllReduce(*flag);
  const float starts = flag->ToFloatVector()[0];
  if (starts != 0.0f && starts != static_cast<float>(referee.WorldSize())) {
    std::cerr << "MpiFaultInjection: the collective started on " << starts << " of " << referee.WorldSize()
              << " ranks\n";
    std::_Exit(EXIT_FAILURE);
  }
}

// Runs an all-reduce, a deferred all-gather and a reduce-scatter with a finish, all in flight
// together (the three follow the order of the follow-up starts), then a plain all-gather, and
// checks that each gets the bits of its blocking twin. @p fault names what failed before them.
void CheckCollectivesAfter(dist::IProcessGroup& group, const std::string& fault) {
  const int rank = group.Rank();
  const auto world = static_cast<std::size_t>(group.WorldSize());
  const auto me = static_cast<std::size_t>(rank);
  constexpr std::size_t kCount = 333;
  auto tensor = mlfw_test::Make(mlfw_test::RankValues(kCount, rank, 0.4f), DataType::Float32);
  TensorPtr expected_sum = tensor->Clone();
  group.AllReduce(*expected_sum);
  const std::vector<float> values = tensor->ToFloatVector();
  auto sum = group.AllReduceAsync(*tensor);

  auto gathered = mlframework::Zeros({kCount * world});
  const TensorPtr slot = gathered->Backend()->View(gathered, kCount * me, {kCount});
  auto gather = group.AllGatherAsyncAfter([&slot, &values] { slot->CopyFromFloats(values); }, *slot, *gathered);

  auto scatter_input = mlfw_test::Make(mlfw_test::RankValues(kCount * world, rank, 0.7f), DataType::BFloat16);
  auto scattered = mlframework::Zeros({kCount}, DataType::BFloat16);
  int finishes = 0;
  // Maxima: exact in any order of the ranks, which a widened group's MPI reduction may choose.
  auto scatter =
      group.ReduceScatterAsyncThen(*scatter_input, *scattered, dist::ReduceOp::Max, [&finishes] { ++finishes; });

  WaitWithin(*sum, "the all-reduce after " + fault);
  WaitWithin(*gather, "the deferred all-gather after " + fault);
  WaitWithin(*scatter, "the reduce-scatter with a finish after " + fault);

  auto plain_input = mlfw_test::Make(mlfw_test::RankValues(kCount, rank, 1.3f), DataType::Float32);
  auto plain_output = mlframework::Zeros({kCount * world});
  auto plain = group.AllGatherAsync(*plain_input, *plain_output);
  WaitWithin(*plain, "the all-gather after " + fault);

  BOOST_TEST(mlfw_test::SameBits(tensor->ToFloatVector(), expected_sum->ToFloatVector()));
  auto expected_gathered = mlframework::Zeros({kCount * world});
  const TensorPtr expected_slot = expected_gathered->Backend()->View(expected_gathered, kCount * me, {kCount});
  expected_slot->CopyFromFloats(values);
  group.AllGather(*expected_slot, *expected_gathered);
  BOOST_TEST(mlfw_test::SameBits(gathered->ToFloatVector(), expected_gathered->ToFloatVector()));
  auto expected_scattered = mlframework::Zeros({kCount}, DataType::BFloat16);
  group.ReduceScatter(*scatter_input, *expected_scattered, dist::ReduceOp::Max);
  BOOST_TEST(mlfw_test::SameBits(scattered->ToFloatVector(), expected_scattered->ToFloatVector()));
  BOOST_TEST(finishes == 1);
  auto expected_plain = mlframework::Zeros({kCount * world});
  group.AllGather(*plain_input, *expected_plain);
  BOOST_TEST(mlfw_test::SameBits(plain_output->ToFloatVector(), expected_plain->ToFloatVector()));
}

// One non-blocking call under test: `call` makes it; once its request completed `output` holds
// `expected`, and after a call that threw, still `before`.
struct FaultedCall {
  std::string name;
  std::function<dist::CollectiveRequestPtr()> call;
  TensorPtr output;
  std::vector<float> before;
  std::vector<float> expected;
};
using FaultedCallMaker = FaultedCall (*)(dist::IProcessGroup& group);

constexpr std::size_t kFaultedCount = 1001;

// The all-to-all all-reduce (the default for FP32): a first stage, then a place in the order.
FaultedCall AllToAllAllReduce(dist::IProcessGroup& group) {
  auto tensor = mlfw_test::Make(mlfw_test::RankValues(kFaultedCount, group.Rank(), 0.5f), DataType::Float32);
  TensorPtr expected = tensor->Clone();
  group.AllReduce(*expected);
  return {"an all-to-all all-reduce", [&group, tensor] { return group.AllReduceAsync(*tensor); }, tensor,
          tensor->ToFloatVector(), expected->ToFloatVector()};
}

// The widened all-reduce of 16-bit data (MPI_Iallreduce in FP32, narrowed after completion).
FaultedCall WidenedAllReduce(dist::IProcessGroup& group) {
  auto tensor = mlfw_test::Make(mlfw_test::RankValues(kFaultedCount, group.Rank(), 0.5f), DataType::BFloat16);
  TensorPtr expected = tensor->Clone();
  group.AllReduce(*expected, dist::ReduceOp::Max);  // exact in any order of the ranks
  return {"a widened all-reduce", [&group, tensor] { return group.AllReduceAsync(*tensor, dist::ReduceOp::Max); },
          tensor, tensor->ToFloatVector(), expected->ToFloatVector()};
}

FaultedCall ReduceScatterThen(dist::IProcessGroup& group, const char* name, dist::ReduceOp op) {
  const auto world = static_cast<std::size_t>(group.WorldSize());
  auto input = mlfw_test::Make(mlfw_test::RankValues(kFaultedCount * world, group.Rank(), 0.6f), DataType::BFloat16);
  auto output = mlframework::Zeros({kFaultedCount}, DataType::BFloat16);
  auto expected = mlframework::Zeros({kFaultedCount}, DataType::BFloat16);
  group.ReduceScatter(*input, *expected, op);
  // The finish leaves its mark in the output's first element, as the caller's later work would.
  auto call = [&group, input, output, op] {
    return group.ReduceScatterAsyncThen(*input, *output, op, [output] {
      std::vector<float> values = output->ToFloatVector();
      values[0] = -1.0f;
      output->CopyFromFloats(values);
    });
  };
  std::vector<float> finished = expected->ToFloatVector();
  finished[0] = -1.0f;
  return {name, call, output, output->ToFloatVector(), finished};
}

// The all-to-all reduce-scatter with a finish (the default for 16-bit data): a place in the
// order, then the all-to-all on the polling thread.
FaultedCall AllToAllReduceScatterThen(dist::IProcessGroup& group) {
  return ReduceScatterThen(group, "an all-to-all reduce-scatter with a finish", dist::ReduceOp::Sum);
}

// The widened reduce-scatter with a finish (MPI_Ireduce_scatter_block in FP32, then the
// narrowing and the finish).
FaultedCall WidenedReduceScatterThen(dist::IProcessGroup& group) {
  return ReduceScatterThen(group, "a widened reduce-scatter with a finish", dist::ReduceOp::Max);
}

FaultedCall AllGather(dist::IProcessGroup& group, bool deferred) {
  const auto world = static_cast<std::size_t>(group.WorldSize());
  const auto me = static_cast<std::size_t>(group.Rank());
  const std::vector<float> values = mlfw_test::RankValues(kFaultedCount, group.Rank(), 0.9f);
  auto output = mlframework::Zeros({kFaultedCount * world});
  const TensorPtr slot = output->Backend()->View(output, kFaultedCount * me, {kFaultedCount});
  auto expected = mlframework::Zeros({kFaultedCount * world});
  auto input = mlfw_test::Make(values, DataType::Float32);
  group.AllGather(*input, *expected);
  std::function<dist::CollectiveRequestPtr()> call = [&group, input, output] {
    return group.AllGatherAsync(*input, *output);
  };
  if (deferred) {  // the send slot is written by the prepare, on the polling thread
    call = [&group, slot, output, values] {
      return group.AllGatherAsyncAfter([slot, values] { slot->CopyFromFloats(values); }, *slot, *output);
    };
  }
  return {deferred ? "a deferred all-gather" : "an all-gather", call, output, output->ToFloatVector(),
          expected->ToFloatVector()};
}

// The deferred all-gather: a place in the order, then the prepare and the all-gather.
FaultedCall DeferredAllGather(dist::IProcessGroup& group) { return AllGather(group, true); }

// The plain all-gather (MPI_Iallgather at once).
FaultedCall PlainAllGather(dist::IProcessGroup& group) { return AllGather(group, false); }

// Fails allocation k = 1, 2, ... of the call @p make sets up on a fresh group with @p options
// until a call no longer reaches its k-th allocation. @p referee checks that the ranks agree.
void SweepAllocationFailures(dist::IProcessGroup& referee, const dist::MpiProcessGroupOptions& options,
                             FaultedCallMaker make) {
  constexpr long kMostAllocations = 64;  // far more than a call makes
  std::string name;
  for (long k = 1; k <= kMostAllocations; ++k) {
    // A fresh engine each time (no kept receive buffer, no thread yet): every rank makes the
    // same allocations, so the same one fails on all of them.
    auto group = dist::MakeMpiProcessGroup(options);
    FaultedCall faulted = make(*group);
    name = faulted.name;
    BOOST_TEST_CONTEXT("allocation " << k << " of " << faulted.name << " fails") {
      dist::CollectiveRequestPtr request;
      bool threw = false;
      FailAllocation(k);
      try {
        request = faulted.call();
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      const bool failed = StopFailingAllocations();
      RequireAgreement(referee, !threw);
      BOOST_TEST((threw ? failed : request != nullptr));  // only the injected failure throws
      const std::string fault = "the failed allocation " + std::to_string(k) + " of " + faulted.name;
      if (request) WaitWithin(*request, fault);

      CheckCollectivesAfter(*group, fault);
      BOOST_TEST(mlfw_test::SameBits(faulted.output->ToFloatVector(), threw ? faulted.before : faulted.expected));
      if (!failed) return;  // the call made fewer than k allocations: each of them failed once
    }
  }
  BOOST_FAIL(name << " still reached its " << kMostAllocations << "th allocation");
}

}  // namespace

// The replaced allocation functions (all forms, so that none pairs with a runtime's own).
void* operator new(std::size_t bytes) { return Allocate(bytes); }
void* operator new[](std::size_t bytes) { return Allocate(bytes); }
void* operator new(std::size_t bytes, std::align_val_t alignment) { return AllocateAligned(bytes, alignment); }
void* operator new[](std::size_t bytes, std::align_val_t alignment) { return AllocateAligned(bytes, alignment); }
void* operator new(std::size_t bytes, const std::nothrow_t& /*tag*/) noexcept {
  return FailsNow() ? nullptr : std::malloc(bytes == 0 ? 1 : bytes);
}
void* operator new[](std::size_t bytes, const std::nothrow_t& tag) noexcept { return operator new(bytes, tag); }
void* operator new(std::size_t bytes, std::align_val_t alignment, const std::nothrow_t& /*tag*/) noexcept {
  try {
    return AllocateAligned(bytes, alignment);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t bytes, std::align_val_t alignment, const std::nothrow_t& tag) noexcept {
  return operator new(bytes, alignment, tag);
}
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete[](void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t /*bytes*/) noexcept { std::free(memory); }
void operator delete[](void* memory, std::size_t /*bytes*/) noexcept { std::free(memory); }
void operator delete(void* memory, std::align_val_t /*alignment*/) noexcept { std::free(memory); }
void operator delete[](void* memory, std::align_val_t /*alignment*/) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t /*bytes*/, std::align_val_t /*alignment*/) noexcept {
  std::free(memory);
}
void operator delete[](void* memory, std::size_t /*bytes*/, std::align_val_t /*alignment*/) noexcept {
  std::free(memory);
}
void operator delete(void* memory, const std::nothrow_t& /*tag*/) noexcept { std::free(memory); }
void operator delete[](void* memory, const std::nothrow_t& /*tag*/) noexcept { std::free(memory); }
void operator delete(void* memory, std::align_val_t /*alignment*/, const std::nothrow_t& /*tag*/) noexcept {
  std::free(memory);
}
void operator delete[](void* memory, std::align_val_t /*alignment*/, const std::nothrow_t& /*tag*/) noexcept {
  std::free(memory);
}

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attributes, void* (*start)(void*),
                              void* argument) {
  using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  // Under AddressSanitizer the runtime's wrapper comes first (it registers the thread), else
  // the C library's function.
  static const auto kNext = [] {
    void* wrapper = dlsym(RTLD_DEFAULT, "__interceptor_pthread_create");
    return reinterpret_cast<Create>(wrapper != nullptr ? wrapper : dlsym(RTLD_NEXT, "pthread_create"));
  }();
  ++thread_starts_here;
  if (failing_thread_starts > 0) {
    --failing_thread_starts;
    return EAGAIN;
  }
  return kNext(thread, attributes, start, argument);
}

extern "C" int MPI_Ialltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                              void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                              MPI_Comm comm, MPI_Request* request) {
  int armed = failing_alltoallv.load();
  while (armed > 0) {
    if (failing_alltoallv.compare_exchange_weak(armed, armed - 1)) return MPI_ERR_OTHER;
  }
  const int code =
      PMPI_Ialltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request);
  if (code == MPI_SUCCESS && recording_alltoallv.load() > 0) {
    (recording_alltoallv.fetch_sub(1) == 2 ? held_request : failing_request).store(*request);
  }
  return code;
}

extern "C" int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  const MPI_Request r = *request;
  if (r != MPI_REQUEST_NULL && r == failing_request.load()) {
    const int code = PMPI_Test(request, flag, status);
    if (code != MPI_SUCCESS || *flag == 0) return code;
    failing_request.store(MPI_REQUEST_NULL);
    held_request.store(MPI_REQUEST_NULL);
    return MPI_ERR_OTHER;  // completed (and freed), reported as failed
  }
  if (r != MPI_REQUEST_NULL && r == held_request.load()) {
    *flag = 0;
    return MPI_SUCCESS;
  }
  return PMPI_Test(request, flag, status);
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

// Two all-reduces in flight: the second fails (its all-to-all reports an error) while the first
// has not yet started its all-gather. The failed one must pass its place in the follow-up order
// only after the first passed its own: passed at once, it would stand for the first one's, which
// would then wait forever, and so would every later operation.
BOOST_AUTO_TEST_CASE(AFailureBehindAnAllReduceWaitingForItsGatherLeavesItRunning) {
  auto group = dist::MakeMpiProcessGroup();
  const int rank = group->Rank();
  constexpr std::size_t kCount = 777;
  auto first = mlfw_test::Make(mlfw_test::RankValues(kCount, rank, 0.3f), DataType::Float32);
  auto second = mlfw_test::Make(mlfw_test::RankValues(kCount, rank, 0.9f), DataType::BFloat16);
  TensorPtr expected_first = first->Clone();
  group->AllReduce(*expected_first);

  recording_alltoallv.store(2);
  auto first_request = group->AllReduceAsync(*first);
  auto second_request = group->AllReduceAsync(*second);
  BOOST_TEST(recording_alltoallv.load() == 0);  // both all-to-alls recorded
  WaitWithin(*first_request, "the all-reduce started before the failed one");
  BOOST_CHECK_THROW(second_request->Wait(), mlframework::CommunicationError);
  BOOST_TEST(failing_request.load() == MPI_REQUEST_NULL);  // the failure was injected
  BOOST_TEST(mlfw_test::SameBits(first->ToFloatVector(), expected_first->ToFloatVector()));

  auto third = mlfw_test::Make(mlfw_test::RankValues(kCount, rank, 1.7f), DataType::Float32);
  TensorPtr expected_third = third->Clone();
  group->AllReduce(*expected_third);
  auto third_request = group->AllReduceAsync(*third);
  WaitWithin(*third_request, "the all-reduce after the failed one");
  BOOST_TEST(mlfw_test::SameBits(third->ToFloatVector(), expected_third->ToFloatVector()));
}

// The k-th allocation of a non-blocking call fails, for every k up to the call's allocation
// count, on every path that starts an MPI request or takes a place in the follow-up order: the
// call either throws bad_alloc having started nothing (its output stays as it was, the group's
// later collectives run) or returns a request that completes with the blocking call's bits. An
// allocation that failed after the operation started, with the operation then dropped, left its
// place in the follow-up order unpassed (the later all-reduce, deferred all-gather and
// reduce-scatter with a finish hang) and MPI writing into freed buffers; one that failed after
// the engine took the operation threw although the operation ran (the output changed).
BOOST_AUTO_TEST_CASE(AFailedAllocationInANonBlockingCallLeavesTheGroupWorking) {
  dist::MpiProcessGroupOptions widened;  // MPI_Iallreduce and MPI_Ireduce_scatter_block in FP32
  widened.HalfSum = dist::HalfReduction::ConvertToFloat32;
  const std::vector<std::pair<dist::MpiProcessGroupOptions, FaultedCallMaker>> calls = {
      {{}, AllToAllAllReduce}, {{}, AllToAllReduceScatterThen}, {{}, DeferredAllGather},
      {{}, PlainAllGather},    {widened, WidenedAllReduce},     {widened, WidenedReduceScatterThen},
  };
  auto referee = dist::MakeMpiProcessGroup();  // checks that the ranks agree, beside the groups under test
  for (const auto& [options, make] : calls) SweepAllocationFailures(*referee, options, make);
}

// The engine's first collective starts its progress thread; here that start fails (EAGAIN, as
// on a machine out of threads). The collective is already started and must not be lost: the
// call returns its request, which completes through Wait(), and the next call starts the thread.
BOOST_AUTO_TEST_CASE(AProgressThreadThatFailsToStartLeavesTheCollectivesToTheirCallers) {
  if (!ProgressThreadOn()) {
    BOOST_TEST_MESSAGE("skipped: MLFW_MPI_PROGRESS_THREAD=0 starts no progress thread");
    return;
  }
  auto group = dist::MakeMpiProcessGroup();  // a fresh engine, whose thread has not started
  const int rank = group->Rank();
  constexpr std::size_t kCount = 1001;
  auto tensor = mlfw_test::Make(mlfw_test::RankValues(kCount, rank, 0.8f), DataType::Float32);
  TensorPtr expected = tensor->Clone();
  group->AllReduce(*expected);

  failing_thread_starts = 1;
  dist::CollectiveRequestPtr request;
  BOOST_CHECK_NO_THROW(request = group->AllReduceAsync(*tensor));
  BOOST_TEST(failing_thread_starts == 0);  // the thread's start was the call that failed
  failing_thread_starts = 0;
  BOOST_REQUIRE(request);
  WaitWithinByWait(*request, "the all-reduce whose thread failed to start");
  BOOST_TEST(mlfw_test::SameBits(tensor->ToFloatVector(), expected->ToFloatVector()));

  // The next collective starts the thread (only the engine starts threads inside the call).
  auto again = mlfw_test::Make(mlfw_test::RankValues(kCount, rank, 1.1f), DataType::Float32);
  TensorPtr expected_again = again->Clone();
  group->AllReduce(*expected_again);
  const int starts = thread_starts_here;
  auto request_again = group->AllReduceAsync(*again);
  BOOST_TEST(thread_starts_here == starts + 1);
  WaitWithin(*request_again, "the all-reduce after the failed thread start");
  BOOST_TEST(mlfw_test::SameBits(again->ToFloatVector(), expected_again->ToFloatVector()));

  CheckCollectivesAfter(*group, "the failed thread start");
}

// The progress thread copies the list of operations in flight before it polls them: when that
// allocation fails (memory is short), the thread must try again, not end the process (an
// exception that leaves a thread's function calls std::terminate).
BOOST_AUTO_TEST_CASE(AProgressThreadWhoseAllocationsFailKeepsProgressing) {
  if (!ProgressThreadOn()) {
    BOOST_TEST_MESSAGE("skipped: MLFW_MPI_PROGRESS_THREAD=0 starts no progress thread");
    return;
  }
  auto group = dist::MakeMpiProcessGroup();
  const int rank = group->Rank();
  constexpr std::size_t kCount = 1001;
  auto tensor = mlfw_test::Make(mlfw_test::RankValues(kCount, rank, 0.3f), DataType::Float32);
  TensorPtr expected = tensor->Clone();
  group->AllReduce(*expected);

  // Every allocation of another thread fails until 1000 have: the progress thread's polls, while
  // this thread submits and waits in Wait(), which leaves the polling to the progress thread.
  sparing_thread.store(std::this_thread::get_id());
  failing_other_allocations.store(1000);
  auto request = group->AllReduceAsync(*tensor);
  WaitWithinByWait(*request, "the all-reduce whose progress thread could not allocate");
  const long left = failing_other_allocations.exchange(0);
  BOOST_TEST(left == 0);  // the failures were reached (by the progress thread's polls)
  BOOST_TEST(mlfw_test::SameBits(tensor->ToFloatVector(), expected->ToFloatVector()));

  CheckCollectivesAfter(*group, "the progress thread's failed allocations");
}

BOOST_AUTO_TEST_SUITE_END()
