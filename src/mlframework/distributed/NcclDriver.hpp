#pragma once
// Private: the NCCL side of the CUDA backend's one driver (backends/cuda/Driver.hpp). Every
// NCCL call of NcclProcessGroup goes through the active NcclDriver: the runtime one calls
// NCCL; a recording one (RecordingNcclDriver.hpp, tests only) records each collective as a
// kernel on its stream with the memory it reads and writes, and can play a dead peer.

#include <functional>
#include <span>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <mlframework/export.hpp>

#include "mlframework/backends/cuda/Driver.hpp"

namespace mlframework::distributed::detail {

class NcclDriver {
 public:
  NcclDriver() = default;
  virtual ~NcclDriver() = default;
  NcclDriver(const NcclDriver&) = delete;
  NcclDriver& operator=(const NcclDriver&) = delete;

  virtual ncclResult_t GetUniqueId(ncclUniqueId* id) = 0;
  virtual ncclResult_t CommInitRank(ncclComm_t* comm, int ranks, const ncclUniqueId& id, int rank) = 0;
  /// ncclCommSplit (ncclInvalidUsage when this build's NCCL has none).
  virtual ncclResult_t CommSplit(ncclComm_t comm, int color, int key, ncclComm_t* part) = 0;
  virtual ncclResult_t CommUserRank(ncclComm_t comm, int* rank) = 0;
  virtual ncclResult_t CommCount(ncclComm_t comm, int* count) = 0;
  virtual ncclResult_t CommDestroy(ncclComm_t comm) = 0;
  virtual ncclResult_t CommAbort(ncclComm_t comm) = 0;
  virtual ncclResult_t CommGetAsyncError(ncclComm_t comm, ncclResult_t* async) = 0;
  virtual const char* GetLastError(ncclComm_t comm) = 0;
  /// Enqueues one collective: @p call makes the NCCL call on @p stream; @p buffers says what it
  /// reads and writes; @p name names it in reports.
  virtual ncclResult_t Collective(const char* name, cudaStream_t stream,
                                  std::span<const backends::cuda::BufferUse> buffers,
                                  const std::function<ncclResult_t()>& call) = 0;
};

/// The driver every NCCL call goes through: NCCL itself unless a test installed another.
NcclDriver& ActiveNcclDriver() noexcept;

/// Installs @p driver (nullptr: NCCL again) and returns the previous one (tests).
MLFRAMEWORK_EXPORT NcclDriver* InstallNcclDriver(NcclDriver* driver) noexcept;

}  // namespace mlframework::distributed::detail
