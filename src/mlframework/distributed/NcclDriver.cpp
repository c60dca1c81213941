// The NcclDriver that calls NCCL, and the active-driver switch (NcclDriver.hpp).

#include "mlframework/distributed/NcclDriver.hpp"

#include <atomic>

namespace mlframework::distributed::detail {

namespace {

class RuntimeNcclDriver final : public NcclDriver {
 public:
  ncclResult_t GetUniqueId(ncclUniqueId* id) override { return ncclGetUniqueId(id); }
  ncclResult_t CommInitRank(ncclComm_t* comm, int ranks, const ncclUniqueId& id, int rank) override {
    return ncclCommInitRank(comm, ranks, id, rank);
  }
  ncclResult_t CommSplit(ncclComm_t comm, int color, int key, ncclComm_t* part) override {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    return ncclCommSplit(comm, color, key, part, nullptr);
#else
    static_cast<void>(comm);
    static_cast<void>(color);
    static_cast<void>(key);
    static_cast<void>(part);
    return ncclInvalidUsage;
#endif
  }
  ncclResult_t CommUserRank(ncclComm_t comm, int* rank) override { return ncclCommUserRank(comm, rank); }
  ncclResult_t CommCount(ncclComm_t comm, int* count) override { return ncclCommCount(comm, count); }
  ncclResult_t CommDestroy(ncclComm_t comm) override { return ncclCommDestroy(comm); }
  ncclResult_t CommAbort(ncclComm_t comm) override { return ncclCommAbort(comm); }
  ncclResult_t CommGetAsyncError(ncclComm_t comm, ncclResult_t* async) override {
    return ncclCommGetAsyncError(comm, async);
  }
  const char* GetLastError(ncclComm_t comm) override { return ncclGetLastError(comm); }
  ncclResult_t Collective(const char* /*name*/, cudaStream_t /*stream*/,
                          std::span<const backends::cuda::BufferUse> /*buffers*/,
                          const std::function<ncclResult_t()>& call) override {
    return call();
  }
};

RuntimeNcclDriver& Runtime() noexcept {
  static RuntimeNcclDriver runtime;
  return runtime;
}

std::atomic<NcclDriver*> active{nullptr};

}  // namespace

NcclDriver& ActiveNcclDriver() noexcept {
  NcclDriver* driver = active.load(std::memory_order_acquire);
  return driver != nullptr ? *driver : Runtime();
}

NcclDriver* InstallNcclDriver(NcclDriver* driver) noexcept {
  NcclDriver* previous = active.exchange(driver, std::memory_order_acq_rel);
  return previous != nullptr ? previous : &Runtime();
}

}  // namespace mlframework::distributed::detail
