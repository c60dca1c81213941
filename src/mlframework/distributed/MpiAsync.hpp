#pragma once
// Private to the MPI engine (includes mpi.h): the non-blocking collectives of MpiProcessGroup.
//
// Open MPI's non-blocking collectives (libnbc) move data only while some thread is inside an
// MPI call. A rank whose main thread computes (or waits for a GPU) would therefore leave a
// started all-gather idle until its Wait(). The engine keeps a progress thread that tests the
// outstanding requests while any exist, so a collective advances during the caller's compute.
// MPI is initialized MPI_THREAD_SERIALIZED: every MPI call of the library (the blocking
// collectives of MpiProcessGroup included) holds MpiCallLock(), and the progress thread takes
// it only for one MPI_Test at a time, so calls never run concurrently and a blocking
// collective never waits for the thread.

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/distributed/CollectiveRequest.hpp>
#include <mlframework/distributed/MpiProcessGroup.hpp>

namespace mlframework::distributed::detail {

// The process-wide lock that serializes every MPI call (MPI_THREAD_SERIALIZED).
std::mutex& MpiCallLock() noexcept;

// The user MPI_Op for 16-bit sums and maxima (MpiProcessGroup.cpp), and the local combine of
// the all-to-all reductions (FP32 accumulation in rank order, one rounding; MpiCombine.cpp).
MPI_Op MpiHalfOp(DataType dtype, ReduceOp op);
void CombineParts(const void* parts, int part_count, std::size_t count, DataType dtype, ReduceOp op, void* out);

// The MPI type a tensor of @p dtype travels as. MPI has no standard 16-bit float type: FP16
// and BF16 move as 16-bit words. FP8 moves as bytes, in all-gathers only (the reductions
// refuse it).
inline MPI_Datatype WireType(DataType dtype) {
  if (IsFloat8(dtype)) return MPI_UINT8_T;
  return dtype == DataType::Float32 ? MPI_FLOAT : MPI_UINT16_T;
}

// MPI's own operation for FP32 data.
inline MPI_Op BuiltinOp(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

class MpiAsyncOp;

// Outstanding operations of one group and the thread that progresses them.
class MpiAsyncEngine : public std::enable_shared_from_this<MpiAsyncEngine> {
 public:
  // @p comm: the group's communicator (requests start on it in the callers' order);
  // @p follow_up: a duplicate on which second stages and deferred all-gathers start, in the
  // order their operations were started (see MpiAsync.cpp).
  MpiAsyncEngine(MPI_Comm comm, MPI_Comm follow_up, int rank, int world_size, MpiProcessGroupOptions options);
  ~MpiAsyncEngine();
  MpiAsyncEngine(const MpiAsyncEngine&) = delete;
  MpiAsyncEngine& operator=(const MpiAsyncEngine&) = delete;

  // With @p prepare, the all-gather is deferred: @p prepare runs and the all-gather starts on
  // follow_up, both on the thread that polls the operation (IProcessGroup::AllGatherAsyncAfter).
  CollectiveRequestPtr AllGather(const ITensor& input, ITensor& output, std::function<void()> prepare = {});
  // @p finish runs on the polling thread once the output is final (ReduceScatterAsyncThen).
  CollectiveRequestPtr ReduceScatter(const ITensor& input, ITensor& output, ReduceOp op,
                                     std::function<void()> finish = {});
  CollectiveRequestPtr AllReduce(ITensor& tensor, ReduceOp op);

  // True when both tensors lie in host memory (staged tensors take the blocking path).
  static bool Stageless(const ITensor& a, const ITensor& b) noexcept;

  // Receive buffers of the all-to-all reductions, reused (page faults on a fresh unit-sized
  // buffer per reduction would cost more than the combine): at least @p bytes long.
  std::vector<std::byte> TakeScratch(std::size_t bytes);
  // Keeps @p buffer for the next TakeScratch() (at most kSpareBuffers are kept).
  void GiveScratch(std::vector<std::byte> buffer) noexcept;

  // Completes every outstanding operation and stops the thread (before the communicators go).
  void Shutdown() noexcept;
  // Advances every outstanding operation once (any thread).
  void ProgressAll();
  // Returns once @p op is done (complete or failed).
  void WaitFor(const MpiAsyncOp& op);
  // Before a blocking collective, with MpiCallLock() held: in the sleeping wait modes, returns
  // once every rank of the communicator has arrived (MPI_Ibarrier, tested with Backoff; the
  // lock is released while sleeping) and true; in Spin, false at once. See MpiWait.hpp.
  bool AwaitPeers();

  MPI_Comm Comm() const noexcept { return comm_; }
  MPI_Comm FollowUp() const noexcept { return follow_up_; }
  int Rank() const noexcept { return rank_; }
  int WorldSize() const noexcept { return world_size_; }
  const MpiProcessGroupOptions& Options() const noexcept { return options_; }
  // Second stages and deferred all-gathers start in the order their operations were started
  // (the same on every rank).
  std::size_t TakeTicket() noexcept { return next_ticket_++; }
  bool MayStart(std::size_t ticket) const noexcept { return started_.load() == ticket; }
  void Started() noexcept { started_.fetch_add(1); }

 private:
  // Starts @p op through @p start and hands it to the engine (see MpiAsync.cpp).
  template <class StartFn>
  CollectiveRequestPtr Submit(std::shared_ptr<MpiAsyncOp> op, const StartFn& start);
  // Moves the started operation in @p node into active_ and starts the thread if none runs.
  void Adopt(std::list<std::shared_ptr<MpiAsyncOp>>& node) noexcept;
  // With mutex_ held: starts the progress thread unless it runs, is not wanted or was stopped.
  void StartThread() noexcept;
  void Run();

  MPI_Comm comm_;
  MPI_Comm follow_up_;
  int rank_;
  int world_size_;
  MpiProcessGroupOptions options_;
  int kernel_threads_;  // the creating thread's OpenMP width, for combines run by the thread
  WaitMode wait_;       // how the blocking collectives wait for the other ranks (AwaitPeers)
  std::size_t next_ticket_ = 0;
  std::atomic<std::size_t> started_{0};
  std::mutex mutex_;  // guards active_, stop_, thread_
  std::condition_variable wake_;
  std::condition_variable finished_;  // notified (after mutex_) when ProgressAll() completed an op
  // A list: a node is allocated before its operation starts and spliced in after (Submit()).
  std::list<std::shared_ptr<MpiAsyncOp>> active_;
  static constexpr std::size_t kSpareBuffers = 2;  // FSDP keeps up to two reductions in flight
  std::vector<std::vector<std::byte>> spare_;
  bool stop_ = false;
  bool use_thread_;
  std::thread thread_;
};

}  // namespace mlframework::distributed::detail
