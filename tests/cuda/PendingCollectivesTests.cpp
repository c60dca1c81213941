// The bookkeeping behind NcclProcessGroup's collectives that do not block the host
// (src/mlframework/distributed/PendingCollectives.hpp), tested on the CPU with fake
// queries, a fake clock and fake abort / async-error hooks: finished work retires, a
// failure or a timeout is raised once and then every call is refused, the watchdog
// thread aborts exactly once and stops on destruction, and owner and watchdog polling
// together do not deadlock.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>

#include "mlframework/distributed/PendingCollectives.hpp"

using mlframework::CommunicationError;
using mlframework::distributed::detail::CollectiveStatus;
using mlframework::distributed::detail::PendingCollectives;
using mlframework::distributed::detail::PendingCollectivesHooks;
using namespace std::chrono_literals;

namespace {

using State = CollectiveStatus::State;

// A clock the test moves by hand.
struct FakeClock {
  std::atomic<std::int64_t> milliseconds{0};
  std::function<PendingCollectivesHooks::TimePoint()> Hook() {
    return [this] { return PendingCollectivesHooks::TimePoint(std::chrono::milliseconds(milliseconds.load())); };
  }
};

// One fake collective: its state is set by the test; counts its releases.
struct FakeWork {
  std::atomic<int> state{static_cast<int>(State::NotDone)};
  std::atomic<int> releases{0};
  std::string message = "cudaEventQuery(event) failed: cudaErrorLaunchFailure (unspecified launch failure)";
  void Set(State s) { state.store(static_cast<int>(s)); }
  std::function<CollectiveStatus()> Query() {
    return [this] {
      const auto s = static_cast<State>(state.load());
      return CollectiveStatus{s, s == State::Failed ? message : std::string()};
    };
  }
  std::function<void()> Release() {
    return [this] { ++releases; };
  }
};

struct Counters {
  std::atomic<int> aborts{0};
  std::atomic<int> async_queries{0};
  std::mutex async_mutex;
  std::string async_error;
  PendingCollectivesHooks Hooks(FakeClock& clock) {
    PendingCollectivesHooks hooks;
    hooks.AsyncError = [this] {
      ++async_queries;
      const std::lock_guard lock(async_mutex);
      return async_error;
    };
    hooks.Abort = [this] { ++aborts; };
    hooks.Clock = clock.Hook();
    return hooks;
  }
  void SetAsyncError(std::string error) {
    const std::lock_guard lock(async_mutex);
    async_error = std::move(error);
  }
};

std::string MessageOf(PendingCollectives& pending, const char* call) {
  try {
    pending.Check(call);
  } catch (const CommunicationError& e) {
    return e.what();
  }
  return {};
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Waits (real time, bounded) until @p condition holds.
template <typename Condition>
bool Eventually(Condition condition, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > end) {
      return false;
    }
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(PendingCollectivesBookkeeping)

BOOST_AUTO_TEST_CASE(FinishedWorkRetiresInOrder) {
  FakeClock clock;
  Counters counters;
  PendingCollectives pending(0, 10.0, 0ms, counters.Hooks(clock));
  FakeWork a, b, c;
  pending.Add("ncclAllGather", a.Query(), a.Release());
  pending.Add("ncclReduceScatter", b.Query(), b.Release());
  pending.Add("ncclAllReduce", c.Query(), c.Release());
  pending.Check("AllReduce");
  BOOST_TEST(pending.PendingCount() == 3u);
  a.Set(State::Done);
  b.Set(State::Done);
  pending.Check("AllReduce");
  BOOST_TEST(pending.PendingCount() == 1u);
  BOOST_TEST(a.releases == 1);
  BOOST_TEST(b.releases == 1);
  BOOST_TEST(c.releases == 0);
  c.Set(State::Done);
  pending.WaitAll("Barrier");
  BOOST_TEST(pending.PendingCount() == 0u);
  BOOST_TEST(c.releases == 1);
  BOOST_TEST(counters.aborts == 0);
  BOOST_TEST(!pending.Failed());
  BOOST_TEST(counters.async_queries > 0);
}

BOOST_AUTO_TEST_CASE(FailureIsRaisedOnceThenEveryCallIsRefused) {
  FakeClock clock;
  Counters counters;
  PendingCollectives pending(2, 10.0, 0ms, counters.Hooks(clock));
  FakeWork a, b;
  pending.Add("ncclAllReduce", a.Query(), a.Release());
  pending.Add("ncclBroadcast", b.Query(), b.Release());
  a.Set(State::Failed);
  const std::string first = MessageOf(pending, "AllGather");
  BOOST_TEST(Contains(first, "ncclAllReduce failed on rank 2: " + a.message));
  BOOST_TEST(pending.Failed());
  BOOST_TEST(counters.aborts == 1);
  // Both entries were released with the failure: nothing is waited for any more.
  BOOST_TEST(pending.PendingCount() == 0u);
  BOOST_TEST(a.releases == 1);
  BOOST_TEST(b.releases == 1);
  const std::string second = MessageOf(pending, "Broadcast");
  BOOST_TEST(Contains(second, "Broadcast: refused on rank 2"));
  BOOST_TEST(Contains(second, "aborted after an earlier failure"));
  BOOST_CHECK_THROW(pending.WaitAll("Barrier"), CommunicationError);
  BOOST_TEST(!pending.Drain());
  BOOST_TEST(counters.aborts == 1);
  // Work added after the failure is released at once.
  FakeWork late;
  pending.Add("ncclAllReduce", late.Query(), late.Release());
  BOOST_TEST(late.releases == 1);
  BOOST_TEST(pending.PendingCount() == 0u);
}

BOOST_AUTO_TEST_CASE(TimeoutNamesCallRankAndLimit) {
  FakeClock clock;
  Counters counters;
  PendingCollectives pending(3, 5.0, 0ms, counters.Hooks(clock));
  FakeWork a;
  pending.Add("ncclReduceScatter", a.Query(), a.Release());
  clock.milliseconds = 4900;
  pending.Check("AllReduce");  // not yet late
  BOOST_TEST(counters.aborts == 0);
  clock.milliseconds = 5100;
  const std::string message = MessageOf(pending, "AllReduce");
  BOOST_TEST(Contains(message, "ncclReduceScatter did not finish within 5 s on rank 3"));
  BOOST_TEST(Contains(message, "aborted"));
  BOOST_TEST(counters.aborts == 1);
  BOOST_TEST(a.releases == 1);
}

BOOST_AUTO_TEST_CASE(NoTimeoutWhenTheLimitIsZero) {
  FakeClock clock;
  Counters counters;
  PendingCollectives pending(0, 0.0, 0ms, counters.Hooks(clock));
  FakeWork a;
  pending.Add("ncclAllReduce", a.Query(), a.Release());
  clock.milliseconds = 1000LL * 3600 * 24 * 365;
  pending.Check("AllReduce");
  BOOST_TEST(!pending.Failed());
  a.Set(State::Done);
  pending.Check("AllReduce");
  BOOST_TEST(pending.PendingCount() == 0u);
}

BOOST_AUTO_TEST_CASE(AsyncErrorFailsTheGroupAndNamesThePendingCall) {
  FakeClock clock;
  Counters counters;
  PendingCollectives pending(1, 10.0, 0ms, counters.Hooks(clock));
  FakeWork a;
  pending.Add("ncclAllGather", a.Query(), a.Release());
  pending.Check("AllGather");
  counters.SetAsyncError("asynchronous NCCL error: remote process exited or there was a network error");
  const std::string message = MessageOf(pending, "ReduceScatter");
  BOOST_TEST(Contains(message, "remote process exited"));
  BOOST_TEST(Contains(message, "rank 1, pending: ncclAllGather"));
  BOOST_TEST(counters.aborts == 1);
  BOOST_CHECK_THROW(pending.Check("ReduceScatter"), CommunicationError);
  BOOST_TEST(counters.aborts == 1);
}

BOOST_AUTO_TEST_CASE(HookExceptionsAreFailures) {
  FakeClock clock;
  Counters counters;
  PendingCollectivesHooks hooks = counters.Hooks(clock);
  hooks.AsyncError = []() -> std::string {
    throw CommunicationError("ncclCommGetAsyncError(comm_, &async) failed: invalid argument at x.cpp:1");
  };
  PendingCollectives pending(0, 10.0, 0ms, hooks);
  const std::string message = MessageOf(pending, "AllReduce");
  BOOST_TEST(Contains(message, "ncclCommGetAsyncError"));
  BOOST_TEST(counters.aborts == 1);

  PendingCollectives throwing_query(0, 10.0, 0ms, counters.Hooks(clock));
  throwing_query.Add(
      "ncclBroadcast", []() -> CollectiveStatus { throw std::runtime_error("cudaEventQuery failed"); }, nullptr);
  const std::string query_message = MessageOf(throwing_query, "Broadcast");
  BOOST_TEST(Contains(query_message, "ncclBroadcast failed: cudaEventQuery failed"));
  BOOST_TEST(counters.aborts == 2);
}

BOOST_AUTO_TEST_CASE(FailFromTheOwnerIsRecordedAsReported) {
  FakeClock clock;
  Counters counters;
  PendingCollectives pending(0, 10.0, 0ms, counters.Hooks(clock));
  FakeWork a;
  pending.Add("ncclAllReduce", a.Query(), a.Release());
  pending.Fail("ncclAllGather(...) failed: unhandled system error at NcclProcessGroup.cpp:1");
  BOOST_TEST(counters.aborts == 1);
  BOOST_TEST(a.releases == 1);
  // The owner threw that error itself: the next call is refused, naming it.
  const std::string message = MessageOf(pending, "AllGather");
  BOOST_TEST(Contains(message, "AllGather: refused on rank 0"));
  BOOST_TEST(Contains(message, "unhandled system error"));
  pending.Fail("a second failure");
  BOOST_TEST(counters.aborts == 1);
  BOOST_TEST(Contains(pending.FailureMessage(), "unhandled system error"));
}

BOOST_AUTO_TEST_CASE(WatchdogRetiresFinishedWork) {
  FakeClock clock;
  Counters counters;
  std::atomic<int> starts{0};
  std::atomic<bool> started_elsewhere{false};
  const auto owner = std::this_thread::get_id();
  PendingCollectivesHooks hooks = counters.Hooks(clock);
  hooks.WatchdogStart = [&] {
    ++starts;
    started_elsewhere = std::this_thread::get_id() != owner;
  };
  FakeWork a;
  {
    PendingCollectives pending(0, 10.0, 2ms, hooks);
    pending.Add("ncclAllReduce", a.Query(), a.Release());
    a.Set(State::Done);
    BOOST_TEST(Eventually([&] { return pending.PendingCount() == 0u; }));
    BOOST_TEST(a.releases == 1);
  }
  BOOST_TEST(starts == 1);
  BOOST_TEST(started_elsewhere.load());
  BOOST_TEST(counters.aborts == 0);
}

BOOST_AUTO_TEST_CASE(WatchdogAbortsExactlyOnceOnTimeout) {
  FakeClock clock;
  Counters counters;
  FakeWork a, b;
  {
    PendingCollectives pending(4, 1.0, 2ms, counters.Hooks(clock));
    pending.Add("ncclAllReduce", a.Query(), a.Release());
    pending.Add("ncclAllGather", b.Query(), b.Release());
    clock.milliseconds = 2000;
    // The owner is busy elsewhere (blocked in a CUDA call): the watchdog alone must abort.
    BOOST_TEST(Eventually([&] { return counters.aborts.load() == 1; }));
    std::this_thread::sleep_for(20ms);
    BOOST_TEST(counters.aborts == 1);
    BOOST_TEST(a.releases == 1);
    BOOST_TEST(b.releases == 1);
    const std::string message = MessageOf(pending, "AllReduce");
    BOOST_TEST(Contains(message, "ncclAllReduce did not finish within 1 s on rank 4"));
    BOOST_TEST(Contains(MessageOf(pending, "AllReduce"), "refused"));
  }
  BOOST_TEST(counters.aborts == 1);
}

BOOST_AUTO_TEST_CASE(WatchdogAbortsOnAsyncError) {
  FakeClock clock;
  Counters counters;
  FakeWork a;
  PendingCollectives pending(0, 0.0, 2ms, counters.Hooks(clock));
  pending.Add("ncclBroadcast", a.Query(), a.Release());
  counters.SetAsyncError("remote process exited");
  BOOST_TEST(Eventually([&] { return pending.Failed(); }));
  BOOST_TEST(counters.aborts == 1);
  BOOST_TEST(Contains(MessageOf(pending, "Broadcast"), "remote process exited"));
}

BOOST_AUTO_TEST_CASE(DestructionStopsTheWatchdogWithWorkPending) {
  FakeClock clock;
  Counters counters;
  FakeWork a;
  const auto start = std::chrono::steady_clock::now();
  {
    PendingCollectives pending(0, 10.0, 50ms, counters.Hooks(clock));
    pending.Add("ncclAllReduce", a.Query(), a.Release());
  }
  // Joined promptly (no wait for the interval, no abort) and the entry was released.
  BOOST_TEST((std::chrono::steady_clock::now() - start < 2s));
  BOOST_TEST(a.releases == 1);
  BOOST_TEST(counters.aborts == 0);
  // An idle watchdog (nothing ever pending) stops as well.
  { const PendingCollectives idle(0, 10.0, 50ms, counters.Hooks(clock)); }
}

BOOST_AUTO_TEST_CASE(OwnerAndWatchdogPollTogetherWithoutDeadlock) {
  FakeClock clock;
  Counters counters;
  // The hooks take one lock, as the NCCL group's communicator lock does, from both threads.
  std::mutex communicator;
  PendingCollectivesHooks hooks = counters.Hooks(clock);
  hooks.AsyncError = [&] {
    const std::lock_guard lock(communicator);
    return std::string();
  };
  hooks.Abort = [&] {
    const std::lock_guard lock(communicator);
    ++counters.aborts;
  };
  constexpr int kWorks = 2000;
  std::vector<std::unique_ptr<FakeWork>> works;
  works.reserve(kWorks);
  {
    PendingCollectives pending(0, 10.0, 1ms, hooks);
    for (int i = 0; i < kWorks; ++i) {
      works.push_back(std::make_unique<FakeWork>());
      {
        const std::lock_guard lock(communicator);  // the enqueue holds the communicator lock
      }
      pending.Add("ncclAllReduce", works.back()->Query(), works.back()->Release());
      if (i >= 3) {
        works[static_cast<std::size_t>(i - 3)]->Set(State::Done);
      }
      pending.Check("AllReduce");
    }
    for (auto& work : works) {
      work->Set(State::Done);
    }
    pending.WaitAll("Barrier");
    BOOST_TEST(pending.PendingCount() == 0u);
    // Now a failure seen by both threads at once: still one abort.
    FakeWork failing;
    pending.Add("ncclAllReduce", failing.Query(), failing.Release());
    failing.Set(State::Failed);
    BOOST_CHECK_THROW(pending.WaitAll("Barrier"), CommunicationError);
    BOOST_TEST(failing.releases == 1);
  }
  BOOST_TEST(counters.aborts == 1);
  int released = 0;
  for (const auto& work : works) {
    released += work->releases.load();
  }
  BOOST_TEST(released == kWorks);
}

BOOST_AUTO_TEST_SUITE_END()
