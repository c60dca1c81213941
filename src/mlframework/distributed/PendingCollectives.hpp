#pragma once
// Private: the bookkeeping of collectives that were enqueued without waiting, in the
// manner of PyTorch's ProcessGroupNCCL watchdog, with no CUDA or NCCL type so that it
// is unit-tested on the CPU with fake queries (tests/cuda/PendingCollectivesTests.cpp).
//
// The owner (NcclProcessGroup) registers each enqueued collective with a query (done,
// not done, failed) and a release (returns its event). Check() retires finished work
// without blocking, asks for an asynchronous communicator error, and fails the oldest
// entry that is older than the timeout. A watchdog thread does the same every interval
// while work is pending, so a hang or a dead peer ends even when the owner is blocked
// elsewhere (in a CUDA synchronisation): the first failure calls the abort hook exactly
// once (ncclCommAbort makes the stuck kernels return) and is recorded; the owner's next
// Check() throws it as CommunicationError, and every later call is refused.
//
// Locking: the state is behind one mutex. Entry queries and releases run under it (they
// must not call back into this object); the async-error and abort hooks run outside it,
// so they may take the owner's communicator lock without a lock-order cycle.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace mlframework::distributed::detail {

/// What a query says about one enqueued collective.
struct CollectiveStatus {
  enum class State { Done, NotDone, Failed };
  State Result = State::NotDone;
  /// Why it failed (only for Failed); the call name and the rank are added to it.
  std::string Message;
};

/// The hooks of the owner; any of them may throw, which counts as a failure with its message.
struct PendingCollectivesHooks {
  using TimePoint = std::chrono::steady_clock::time_point;
  /// "" while the communicator is healthy, else its asynchronous error.
  std::function<std::string()> AsyncError;
  /// Aborts the communicator; called once, on the first failure.
  std::function<void()> Abort;
  /// The clock of enqueue times and timeouts (steady_clock::now when empty).
  std::function<TimePoint()> Clock;
  /// Runs once on the watchdog thread before its first poll (for example cudaSetDevice).
  std::function<void()> WatchdogStart;
};

class PendingCollectives {
 public:
  using TimePoint = PendingCollectivesHooks::TimePoint;

  /// @p rank names this rank in messages; @p timeout_seconds 0 means no limit; a zero
  /// @p watchdog_interval starts no watchdog thread (the owner's calls still poll).
  PendingCollectives(int rank, double timeout_seconds, std::chrono::milliseconds watchdog_interval,
                     PendingCollectivesHooks hooks);
  /// Stops and joins the watchdog, then releases every entry still held.
  ~PendingCollectives();
  PendingCollectives(const PendingCollectives&) = delete;
  PendingCollectives& operator=(const PendingCollectives&) = delete;

  /// Registers an enqueued collective named @p call (a string literal). After a recorded
  /// failure the entry is released at once (the communicator is gone).
  void Add(const char* call, std::function<CollectiveStatus()> query, std::function<void()> release);

  /// Owner, before and after each collective @p call: polls without blocking and throws
  /// CommunicationError on a failure (the recorded one first, then a refusal naming @p call).
  void Check(const char* call);
  /// Owner: Check() until nothing is pending (sleeping @p pause between polls).
  void WaitAll(const char* call, std::chrono::microseconds pause = std::chrono::microseconds(20));
  /// Destructor path: WaitAll without throwing; false when the group failed (now or earlier).
  bool Drain() noexcept;

  /// Records @p message as the failure (a failed enqueue, a failed wait) and aborts once.
  /// Marks it as reported: the caller throws its own error.
  void Fail(const std::string& message);
  /// Stops and joins the watchdog thread (idempotent).
  void StopWatchdog() noexcept;

  bool Failed() const;
  std::size_t PendingCount() const;
  /// The recorded failure, or "".
  std::string FailureMessage() const;

 private:
  struct Entry {
    const char* call;
    TimePoint enqueued;
    std::function<CollectiveStatus()> query;
    std::function<void()> release;
  };

  TimePoint Now() const;
  // One non-blocking poll; returns the failure recorded by it or before it ("" when healthy).
  std::string Poll();
  // Under mutex_: retires finished entries from the front; returns a failure message or "".
  std::string RetireLocked();
  // Records @p message unless a failure is already recorded, releases the entries and
  // calls the abort hook the first time. Call without holding mutex_.
  void RecordFailure(const std::string& message, bool reported);
  void ReleaseAllLocked() noexcept;
  void WatchdogLoop();

  int rank_;
  double timeout_seconds_;
  std::chrono::milliseconds interval_;
  PendingCollectivesHooks hooks_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Entry> entries_;
  std::string failure_;
  bool failed_ = false;
  bool reported_ = false;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace mlframework::distributed::detail
