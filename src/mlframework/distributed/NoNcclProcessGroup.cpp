// Builds without NCCL: the factories say so with a BackendError.
#include <mlframework/core/Error.hpp>
#include <mlframework/distributed/NcclProcessGroup.hpp>

namespace mlframework::distributed {

namespace {

constexpr const char* kNoNccl =
    "this build of mlframework has no NCCL process group (needs the CUDA backend and NCCL; set NCCL_ROOT)";

}  // namespace

bool NcclAvailable() noexcept { return false; }

NcclUniqueId MakeNcclUniqueId() { throw BackendError(kNoNccl); }

std::shared_ptr<IProcessGroup> MakeNcclProcessGroup(const NcclUniqueId& /*id*/, int /*rank*/, int /*world_size*/,
                                                    NcclProcessGroupOptions /*options*/) {
  throw BackendError(kNoNccl);
}

std::shared_ptr<IProcessGroup> MakeNcclProcessGroup(IProcessGroup& /*bootstrap*/, NcclProcessGroupOptions /*options*/) {
  throw BackendError(kNoNccl);
}

}  // namespace mlframework::distributed
