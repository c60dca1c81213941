#include "mlframework/distributed/MpiWait.hpp"

#include <algorithm>
#include <thread>

#include "mlframework/distributed/MpiAsync.hpp"

namespace mlframework::distributed::detail {

namespace {

// Releases the held MpiCallLock() for its lifetime (and takes it back on every path).
class Unlocked {
 public:
  Unlocked() { MpiCallLock().unlock(); }
  ~Unlocked() { MpiCallLock().lock(); }
  Unlocked(const Unlocked&) = delete;
  Unlocked& operator=(const Unlocked&) = delete;
};

}  // namespace

void Backoff::Reset() noexcept {
  start_ = std::chrono::steady_clock::now();
  sleep_ = kFirstSleep;
}

bool Backoff::Spinning() const noexcept {
  return mode_ == WaitMode::Hybrid && std::chrono::steady_clock::now() - start_ < kSpinTime;
}

void Backoff::Pause() {
  if (Spinning()) return;
  std::this_thread::sleep_for(sleep_);
  sleep_ = std::min(sleep_ * 2, kMaxSleep);
}

int WaitHeld(MPI_Request* request, WaitMode mode) {
  if (mode == WaitMode::Spin) return MPI_Wait(request, MPI_STATUS_IGNORE);
  Backoff backoff(mode);
  for (;;) {
    int done = 0;
    const int code = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS || done != 0) return code;
    if (backoff.Spinning()) continue;
    const Unlocked unlocked;
    backoff.Pause();
  }
}

}  // namespace mlframework::distributed::detail
