#pragma once
/// @file NcclProcessGroup.hpp
/// @brief Process group over NCCL: collectives between GPUs (FSDP on CUDA tensors).
///
/// This header has no NCCL or CUDA types, so it is the same in every build; in a build
/// without NCCL (`MLFW_HAS_NCCL == 0` in mlframework/config.hpp) the factories throw
/// BackendError.
///
/// Collectives run on the CUDA backend's stream of the group's device, so they are
/// ordered with the backend's kernels (for example unscale after reduce-scatter). FP32,
/// FP16 and BF16 travel natively (ncclFloat32, ncclHalf, ncclBfloat16); NCCL sums 16-bit
/// values with one rounding per combine. CUDA tensors on the group's device are used in
/// place; any other tensor (CPU, another GPU, a user backend) is staged through a CUDA
/// copy. Every NCCL and CUDA call is checked; a failed collective, an asynchronous NCCL
/// error or a timeout aborts the communicator (ncclCommAbort) and throws
/// CommunicationError naming the call, NCCL's error string and its last error message.
///
/// The host does not wait for a collective whose tensors are all CUDA tensors on the
/// group's device (as PyTorch's ProcessGroupNCCL): it is enqueued, an event is recorded
/// after it and the call returns; stream order makes later backend kernels, and reads
/// such as `ToFloatVector()`, see its result. A collective that hands data to the host
/// (staged tensors, `AllReduceHost`) or must see every rank enter (`Barrier`) waits, and
/// so does every collective with `NcclProcessGroupOptions::Blocking`. Failures are never
/// lost: each call first polls the pending collectives without blocking, and a watchdog
/// thread of the group polls them every 50 ms while any is pending; an asynchronous NCCL
/// error, a failed collective or one pending longer than `TimeoutSeconds` aborts the
/// communicator (so kernels stuck in it return and a host blocked in a CUDA call gets
/// control back), and the next call on the group throws CommunicationError naming the
/// collective, the rank and the timeout; every call after that is refused.

#include <array>
#include <cstdint>
#include <memory>

#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/export.hpp>

namespace mlframework::distributed {

/// The bytes of an `ncclUniqueId`: made on one rank, handed to all (by any means) to form a group.
using NcclUniqueId = std::array<std::uint8_t, 128>;

/// Options of an NCCL process group.
struct NcclProcessGroupOptions {
  /// CUDA device of this rank; -1: `rank % DeviceCount()` (one GPU per rank on each node).
  int Device = -1;
  /// A collective not finished this many seconds after it was enqueued aborts the
  /// communicator (found by the watchdog or by the next call) and the next call throws
  /// CommunicationError (a rank that died cannot make the others wait forever); 0: no limit.
  double TimeoutSeconds = 600.0;
  /// true: every collective waits for its completion before it returns (polling for
  /// asynchronous NCCL errors and the timeout), like TORCH_NCCL_BLOCKING_WAIT; failures are
  /// then raised by the collective that failed. false (default): collectives on tensors of
  /// the group's device return once enqueued and a failure is raised by the next call.
  bool Blocking = false;
};

/// True when this build has the NCCL engine.
MLFRAMEWORK_EXPORT bool NcclAvailable() noexcept;
/// A new unique id (call on one rank only); BackendError without NCCL, CommunicationError on failure.
MLFRAMEWORK_EXPORT NcclUniqueId MakeNcclUniqueId();
/// Joins the group @p id as rank @p rank of @p world_size (blocks until every rank joined).
/// ArgumentError for a rank outside [0, world_size) or a bad option, BackendError without NCCL
/// or without the device, CommunicationError when NCCL fails.
MLFRAMEWORK_EXPORT std::shared_ptr<IProcessGroup> MakeNcclProcessGroup(const NcclUniqueId& id, int rank, int world_size,
                                                                       NcclProcessGroupOptions options = {});
/// Forms an NCCL group with the ranks of @p bootstrap (for example an MpiProcessGroup): rank 0
/// makes the id and shares it with AllReduceHost, so every rank succeeds or throws together.
MLFRAMEWORK_EXPORT std::shared_ptr<IProcessGroup> MakeNcclProcessGroup(IProcessGroup& bootstrap,
                                                                       NcclProcessGroupOptions options = {});

}  // namespace mlframework::distributed
