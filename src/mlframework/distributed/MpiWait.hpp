#pragma once
// Private to the MPI engine (includes mpi.h): how a rank waits for MPI (WaitMode).
//
// Open MPI's blocking collectives and MPI_Wait poll until the operation completes. A rank that
// waits for a slower peer therefore keeps its core busy, and on a machine shared with other
// work the scheduler can never hand that core to it. In the sleeping modes the blocking
// collectives of MpiProcessGroup start their non-blocking twins and test them here, sleeping
// between tests without MpiCallLock(), and the progress thread of MpiAsync sleeps the same way.

#include <mpi.h>

#include <chrono>

#include <mlframework/distributed/MpiProcessGroup.hpp>

namespace mlframework::distributed::detail {

// The pauses between tests of an outstanding operation.
class Backoff {
 public:
  explicit Backoff(WaitMode mode) noexcept : mode_(mode) { Reset(); }
  // After progress (or a new operation): Hybrid spins again, sleeps start short again.
  void Reset() noexcept;
  // True while the next test should follow at once: Hybrid's first kSpinTime after Reset().
  bool Spinning() const noexcept;
  // After a test that found nothing done: Spin yields, Hybrid returns at once while Spinning(),
  // else the thread sleeps, each sleep twice the last, from kFirstSleep up to kMaxSleep.
  void Pause();

  // Bounded so that the fast exchanges of a quiet machine complete before the first sleep.
  static constexpr std::chrono::microseconds kSpinTime{50};
  // Open MPI moves shared-memory fragments only inside MPI calls on both sides (without
  // single-copy), so long sleeps would throttle large transfers: the cap stays small.
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

// The blocking collectives of MpiProcessGroup, with MPI's signatures after the mode: in Spin
// the blocking call itself, else its non-blocking twin completed by WaitHeld(). The caller holds
// MpiCallLock(). Each returns the MPI error code.
int Allgather(WaitMode mode, const void* send, int send_count, MPI_Datatype send_type, void* recv, int recv_count,
              MPI_Datatype recv_type, MPI_Comm comm);
int Allgatherv(WaitMode mode, const void* send, int send_count, MPI_Datatype send_type, void* recv,
               const int* recv_counts, const int* displacements, MPI_Datatype recv_type, MPI_Comm comm);
int Alltoallv(WaitMode mode, const void* send, const int* send_counts, const int* send_displacements,
              MPI_Datatype send_type, void* recv, const int* recv_counts, const int* recv_displacements,
              MPI_Datatype recv_type, MPI_Comm comm);
int ReduceScatterBlock(WaitMode mode, const void* send, void* recv, int recv_count, MPI_Datatype type, MPI_Op op,
                       MPI_Comm comm);
int Allreduce(WaitMode mode, const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
int Bcast(WaitMode mode, void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm);
int Barrier(WaitMode mode, MPI_Comm comm);

}  // namespace mlframework::distributed::detail
