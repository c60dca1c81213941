#pragma once
// Private, for tests: an NcclDriver for rank 0 of a group whose peers are only pretended. Each
// collective is recorded on the active CUDA driver, a RecordingDriver, as a kernel on its stream
// with the memory it reads and writes, and moves no data (what a peer would have sent is whatever
// the output held): the recording checks the order of the calls, not their values. With more
// than one rank the group takes the paths a real world size takes (FSDP's sharding, its FP8
// gradient wire). With DeadPeer() every collective from then on never ends (the recorder's
// Stall()), until the communicator is aborted, as NCCL does with a dead or absent peer.

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "mlframework/backends/cuda/RecordingDriver.hpp"
#include "mlframework/distributed/NcclDriver.hpp"

namespace mlframework::distributed::detail {

class RecordingNcclDriver final : public NcclDriver {
 public:
  /// Communicators of @p ranks ranks, this process being rank 0.
  explicit RecordingNcclDriver(int ranks = 1) noexcept : ranks_(ranks) {}

  /// Every later collective waits for a peer that never comes.
  void DeadPeer() noexcept { dead_peer_ = true; }
  /// Communicators aborted so far.
  int Aborts() const noexcept { return aborts_; }
  /// Collectives named @p name recorded so far ("ncclSend/ncclRecv (all-to-all)").
  int Count(const std::string& name) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto found = counts_.find(name);
    return found == counts_.end() ? 0 : found->second;
  }

  ncclResult_t GetUniqueId(ncclUniqueId* id) override {
    *id = ncclUniqueId{};
    return ncclSuccess;
  }
  ncclResult_t CommInitRank(ncclComm_t* comm, int ranks, const ncclUniqueId& /*id*/, int rank) override {
    if (ranks != ranks_ || rank != 0) {
      return ncclInvalidArgument;  // the group was built for another world than this driver pretends
    }
    *comm = Handle();
    return ncclSuccess;
  }
  ncclResult_t CommSplit(ncclComm_t /*comm*/, int /*color*/, int /*key*/, ncclComm_t* part) override {
    *part = Handle();
    return ncclSuccess;
  }
  ncclResult_t CommUserRank(ncclComm_t /*comm*/, int* rank) override {
    *rank = 0;
    return ncclSuccess;
  }
  ncclResult_t CommCount(ncclComm_t /*comm*/, int* count) override {
    *count = ranks_;
    return ncclSuccess;
  }
  ncclResult_t CommDestroy(ncclComm_t /*comm*/) override { return ncclSuccess; }
  ncclResult_t CommAbort(ncclComm_t /*comm*/) override {
    ++aborts_;
    Cuda().Unstall();  // the stuck kernels return
    return ncclSuccess;
  }
  ncclResult_t CommGetAsyncError(ncclComm_t /*comm*/, ncclResult_t* async) override {
    *async = ncclSuccess;
    return ncclSuccess;
  }
  const char* GetLastError(ncclComm_t /*comm*/) override { return ""; }
  ncclResult_t Collective(const char* name, cudaStream_t stream, std::span<const backends::cuda::BufferUse> buffers,
                          const std::function<ncclResult_t()>& /*call*/) override {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      ++counts_[name];
    }
    backends::cuda::RecordingDriver& cuda = Cuda();
    cuda.Launch(name, stream, backends::cuda::KernelOperands{{}, backends::cuda::Access::Writes, buffers}, [] {});
    if (dead_peer_) {
      cuda.Stall(stream);
    }
    return ncclSuccess;
  }

 private:
  static backends::cuda::RecordingDriver& Cuda() {
    return dynamic_cast<backends::cuda::RecordingDriver&>(backends::cuda::ActiveDriver());
  }
  ncclComm_t Handle() noexcept {
    return reinterpret_cast<ncclComm_t>(next_++);  // NOLINT(performance-no-int-to-ptr): opaque, never dereferenced
  }

  int ranks_;
  std::uintptr_t next_ = 0x100;
  std::atomic<bool> dead_peer_{false};
  std::atomic<int> aborts_{0};
  mutable std::mutex mutex_;  // collectives come from the caller's thread and the watchdog's
  std::map<std::string, int> counts_;
};

}  // namespace mlframework::distributed::detail
