#pragma once
// Private to the MPI engine (includes mpi.h): how a rank waits for MPI (WaitMode).
//
// Open MPI's blocking collectives and MPI_Wait poll until the operation completes. A rank that
// waits for a slower peer therefore keeps its core busy, and on a machine shared with other
// work the scheduler can never hand that core to it. Sleeping through the whole collective
// does not work either: without single-copy, Open MPI moves a large message's shared-memory
// fragments only inside MPI calls on both sides, so a rank that sleeps between tests turns
// every fragment round trip into a sleep. In the sleeping modes a blocking collective
// therefore first waits for the other ranks to arrive (an MPI_Ibarrier tested with Backoff,
// sleeping without MpiCallLock()), then moves the data in MPI's blocking call, which every
// rank has entered by then. The progress thread of MpiAsync yields in every mode, since its
// tests move the data of the operations in flight.

#include <mpi.h>

#include <chrono>

#include <mlframework/distributed/MpiProcessGroup.hpp>

namespace mlframework::distributed::detail {

// The pauses between tests of an outstanding operation.
class Backoff {
 public:
  explicit Backoff(WaitMode mode) noexcept : mode_(mode) { Reset(); }
  // Starts a wait: Hybrid spins again, sleeps start short again.
  void Reset() noexcept;
  // True while the next test should follow at once: Hybrid's first kSpinTime after Reset().
  bool Spinning() const noexcept;
  // After a test that found nothing done: returns at once while Spinning(), else sleeps, each
  // sleep twice the last, from kFirstSleep up to kMaxSleep (Sleep and Hybrid only).
  void Pause();

  // Long enough for ranks that arrive together on a quiet machine, short against a late peer.
  static constexpr std::chrono::microseconds kSpinTime{50};
  // The cap bounds how late a sleeping rank notices the last arrival (plus the kernel's timer
  // slack, about 50 us), a delay paid once per blocking collective, about 30 times an FSDP step.
  static constexpr std::chrono::microseconds kFirstSleep{5};
  static constexpr std::chrono::microseconds kMaxSleep{200};

 private:
  WaitMode mode_;
  std::chrono::steady_clock::time_point start_{};
  std::chrono::microseconds sleep_ = kFirstSleep;
};

// Completes @p request in @p mode: MPI_Wait in Spin, else MPI_Test with Backoff pauses. The
// caller holds MpiCallLock(); it is released while sleeping and held again on return. Returns
// the MPI error code.
int WaitHeld(MPI_Request* request, WaitMode mode);

}  // namespace mlframework::distributed::detail
