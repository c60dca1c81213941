#include "mlframework/distributed/PendingCollectives.hpp"

#include <cstdio>
#include <exception>
#include <utility>

#include <mlframework/core/Error.hpp>

namespace mlframework::distributed::detail {

namespace {

std::string FormatSeconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

}  // namespace

PendingCollectives::PendingCollectives(int rank, double timeout_seconds, std::chrono::milliseconds watchdog_interval,
                                       PendingCollectivesHooks hooks)
    : rank_(rank), timeout_seconds_(timeout_seconds), interval_(watchdog_interval), hooks_(std::move(hooks)) {
  if (interval_.count() > 0) {
    watchdog_ = std::thread([this] { WatchdogLoop(); });
  }
}

PendingCollectives::~PendingCollectives() {
  StopWatchdog();
  const std::lock_guard lock(mutex_);
  ReleaseAllLocked();
}

PendingCollectives::TimePoint PendingCollectives::Now() const {
  return hooks_.Clock ? hooks_.Clock() : std::chrono::steady_clock::now();
}

void PendingCollectives::Add(const char* call, std::function<CollectiveStatus()> query, std::function<void()> release) {
  const TimePoint now = Now();
  {
    const std::lock_guard lock(mutex_);
    if (failed_) {
      // The communicator was aborted: nothing will be waited for; the next call raises.
      if (release) {
        release();
      }
      return;
    }
    entries_.push_back(Entry{call, now, std::move(query), std::move(release)});
  }
  wake_.notify_all();
}

std::string PendingCollectives::RetireLocked() {
  // Entries complete in the order they were enqueued (one stream): retire from the front
  // and stop at the first one that is still running.
  while (!entries_.empty()) {
    Entry& front = entries_.front();
    CollectiveStatus status;
    try {
      status = front.query();
    } catch (const std::exception& e) {
      status = CollectiveStatus{CollectiveStatus::State::Failed, std::string(front.call) + " failed: " + e.what()};
    }
    if (status.Result == CollectiveStatus::State::Failed) {
      return std::string(front.call) + " failed on rank " + std::to_string(rank_) + ": " + status.Message +
             "; the communicator was aborted";
    }
    if (status.Result == CollectiveStatus::State::NotDone) {
      const double waited = std::chrono::duration<double>(Now() - front.enqueued).count();
      if (timeout_seconds_ > 0.0 && waited > timeout_seconds_) {
        return std::string(front.call) + " did not finish within " + FormatSeconds(timeout_seconds_) + " s on rank " +
               std::to_string(rank_) + " (a rank died or did not enter the collective); the communicator was aborted";
      }
      return {};
    }
    if (front.release) {
      front.release();
    }
    entries_.pop_front();
  }
  return {};
}

std::string PendingCollectives::Poll() {
  std::string failure;
  std::string pending_call;
  {
    const std::lock_guard lock(mutex_);
    if (failed_) {
      return failure_;
    }
    failure = RetireLocked();
    if (!entries_.empty()) {
      pending_call = entries_.front().call;
    }
  }
  if (failure.empty() && hooks_.AsyncError) {
    std::string async;
    try {
      async = hooks_.AsyncError();
    } catch (const std::exception& e) {
      async = e.what();
    }
    if (!async.empty()) {
      failure = async + " (rank " + std::to_string(rank_) +
                (pending_call.empty() ? std::string(")") : ", pending: " + pending_call + ")") +
                "; the communicator was aborted";
    }
  }
  if (failure.empty()) {
    return {};
  }
  RecordFailure(failure, false);
  const std::lock_guard lock(mutex_);
  return failure_;
}

void PendingCollectives::RecordFailure(const std::string& message, bool reported) {
  bool first = false;
  {
    const std::lock_guard lock(mutex_);
    if (!failed_) {
      first = true;
      failed_ = true;
      failure_ = message;
      reported_ = reported;
      ReleaseAllLocked();
    }
  }
  wake_.notify_all();
  if (first && hooks_.Abort) {
    try {
      hooks_.Abort();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mlframework: rank %d: aborting the communicator failed: %s\n", rank_, e.what());
    }
  }
}

void PendingCollectives::Check(const char* call) {
  if (Poll().empty()) {
    return;
  }
  const std::lock_guard lock(mutex_);
  if (!reported_) {
    reported_ = true;
    throw CommunicationError(failure_);
  }
  throw CommunicationError(std::string(call) + ": refused on rank " + std::to_string(rank_) +
                           ": the communicator was aborted after an earlier failure (" + failure_ + ")");
}

void PendingCollectives::WaitAll(const char* call, std::chrono::microseconds pause) {
  for (;;) {
    Check(call);
    {
      const std::lock_guard lock(mutex_);
      if (entries_.empty()) {
        return;
      }
    }
    std::this_thread::sleep_for(pause);
  }
}

bool PendingCollectives::Drain() noexcept {
  try {
    WaitAll("shutdown");
    return true;
  } catch (...) {
    return false;
  }
}

void PendingCollectives::Fail(const std::string& message) { RecordFailure(message, true); }

void PendingCollectives::StopWatchdog() noexcept {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (watchdog_.joinable()) {
    watchdog_.join();
  }
}

bool PendingCollectives::Failed() const {
  const std::lock_guard lock(mutex_);
  return failed_;
}

std::size_t PendingCollectives::PendingCount() const {
  const std::lock_guard lock(mutex_);
  return entries_.size();
}

std::string PendingCollectives::FailureMessage() const {
  const std::lock_guard lock(mutex_);
  return failure_;
}

void PendingCollectives::ReleaseAllLocked() noexcept {
  for (Entry& entry : entries_) {
    if (entry.release) {
      try {
        entry.release();
      } catch (...) {
        // A release only returns an event; nothing is left to undo when it fails.
      }
    }
  }
  entries_.clear();
}

void PendingCollectives::WatchdogLoop() {
  if (hooks_.WatchdogStart) {
    try {
      hooks_.WatchdogStart();
    } catch (const std::exception& e) {
      RecordFailure("the watchdog of rank " + std::to_string(rank_) + " could not start: " + e.what(), false);
    }
  }
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (entries_.empty() || failed_) {
      // Idle until work is added (or the group stops): no polling while nothing is pending.
      wake_.wait(lock, [this] { return stop_ || (!entries_.empty() && !failed_); });
      continue;
    }
    if (wake_.wait_for(lock, interval_, [this] { return stop_; })) {
      break;
    }
    lock.unlock();
    try {
      static_cast<void>(Poll());
    } catch (...) {
      // Out of memory while formatting a message: the owner's next poll reports the failure.
    }
    lock.lock();
  }
}

}  // namespace mlframework::distributed::detail
