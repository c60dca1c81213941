#pragma once
// Private, for tests: an NcclDriver for one rank that talks to no peer. Each collective is
// recorded on the active CUDA driver, a RecordingDriver, as a kernel on its stream with the
// memory it reads and writes; with DeadPeer() every collective from then on never ends (the
// recorder's Stall()), until the communicator is aborted, as NCCL does with a dead or absent peer.

#include <atomic>
#include <cstdint>

#include "mlframework/backends/cuda/RecordingDriver.hpp"
#include "mlframework/distributed/NcclDriver.hpp"

namespace mlframework::distributed::detail {

class RecordingNcclDriver final : public NcclDriver {
 public:
  /// Every later collective waits for a peer that never comes.
  void DeadPeer() noexcept { dead_peer_ = true; }
  /// Communicators aborted so far.
  int Aborts() const noexcept { return aborts_; }

  ncclResult_t GetUniqueId(ncclUniqueId* id) override {
    *id = ncclUniqueId{};
    return ncclSuccess;
  }
  ncclResult_t CommInitRank(ncclComm_t* comm, int /*ranks*/, const ncclUniqueId& /*id*/, int /*rank*/) override {
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
    *count = 1;
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

  std::uintptr_t next_ = 0x100;
  std::atomic<bool> dead_peer_{false};
  std::atomic<int> aborts_{0};
};

}  // namespace mlframework::distributed::detail
