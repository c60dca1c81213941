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

// Starts a non-blocking collective with @p start (a call that fills the request), then waits.
template <class Start>
int StartAndWait(WaitMode mode, Start start) {
  MPI_Request request = MPI_REQUEST_NULL;
  const int code = start(&request);
  if (code != MPI_SUCCESS) return code;
  return WaitHeld(&request, mode);
}

}  // namespace

void Backoff::Reset() noexcept {
  start_ = std::chrono::steady_clock::now();
  sleep_ = kFirstSleep;
}

bool Backoff::Spinning() const noexcept {
  return mode_ == WaitMode::Hybrid && std::chrono::steady_clock::now() - start_ < kSpinTime;
}

void Backoff::Pause() {
  if (mode_ == WaitMode::Spin) {
    std::this_thread::yield();
    return;
  }
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

int Allgather(WaitMode mode, const void* send, int send_count, MPI_Datatype send_type, void* recv, int recv_count,
              MPI_Datatype recv_type, MPI_Comm comm) {
  if (mode == WaitMode::Spin) return MPI_Allgather(send, send_count, send_type, recv, recv_count, recv_type, comm);
  return StartAndWait(mode, [&](MPI_Request* request) {
    return MPI_Iallgather(send, send_count, send_type, recv, recv_count, recv_type, comm, request);
  });
}

int Allgatherv(WaitMode mode, const void* send, int send_count, MPI_Datatype send_type, void* recv,
               const int* recv_counts, const int* displacements, MPI_Datatype recv_type, MPI_Comm comm) {
  if (mode == WaitMode::Spin) {
    return MPI_Allgatherv(send, send_count, send_type, recv, recv_counts, displacements, recv_type, comm);
  }
  return StartAndWait(mode, [&](MPI_Request* request) {
    return MPI_Iallgatherv(send, send_count, send_type, recv, recv_counts, displacements, recv_type, comm, request);
  });
}

int Alltoallv(WaitMode mode, const void* send, const int* send_counts, const int* send_displacements,
              MPI_Datatype send_type, void* recv, const int* recv_counts, const int* recv_displacements,
              MPI_Datatype recv_type, MPI_Comm comm) {
  if (mode == WaitMode::Spin) {
    return MPI_Alltoallv(send, send_counts, send_displacements, send_type, recv, recv_counts, recv_displacements,
                         recv_type, comm);
  }
  return StartAndWait(mode, [&](MPI_Request* request) {
    return MPI_Ialltoallv(send, send_counts, send_displacements, send_type, recv, recv_counts, recv_displacements,
                          recv_type, comm, request);
  });
}

int ReduceScatterBlock(WaitMode mode, const void* send, void* recv, int recv_count, MPI_Datatype type, MPI_Op op,
                       MPI_Comm comm) {
  if (mode == WaitMode::Spin) return MPI_Reduce_scatter_block(send, recv, recv_count, type, op, comm);
  return StartAndWait(mode, [&](MPI_Request* request) {
    return MPI_Ireduce_scatter_block(send, recv, recv_count, type, op, comm, request);
  });
}

int Allreduce(WaitMode mode, const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  if (mode == WaitMode::Spin) return MPI_Allreduce(send, recv, count, type, op, comm);
  return StartAndWait(mode,
                      [&](MPI_Request* request) { return MPI_Iallreduce(send, recv, count, type, op, comm, request); });
}

int Bcast(WaitMode mode, void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  if (mode == WaitMode::Spin) return MPI_Bcast(buffer, count, type, root, comm);
  return StartAndWait(mode, [&](MPI_Request* request) { return MPI_Ibcast(buffer, count, type, root, comm, request); });
}

int Barrier(WaitMode mode, MPI_Comm comm) {
  if (mode == WaitMode::Spin) return MPI_Barrier(comm);
  return StartAndWait(mode, [&](MPI_Request* request) { return MPI_Ibarrier(comm, request); });
}

}  // namespace mlframework::distributed::detail
