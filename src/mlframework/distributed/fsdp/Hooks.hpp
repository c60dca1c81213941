#pragma once
// Private: checks shared by FSDP.cpp and the hooks (FSDPHooks.cpp).

#include <mlframework/distributed/fsdp/FSDP.hpp>

namespace mlframework::distributed::fsdp::detail {

// InvalidOperationError (local) naming the first unit with a gradient reduction in flight: the
// norm and the step read every gradient shard, a checkpoint load drops them. Callers run it
// inside an agreed check.
void RefuseReductionsInFlight(FSDP& fsdp);

// InvalidOperationError (local) naming the first unit a load must not overwrite: gathered (its
// full parameters would outlive the shard), being gathered (the all-gather still reads the
// shard), holding gradients accumulated without sync or with a reduction in flight (gradients of
// the old model, applied to the loaded one). FSDP::LoadStateDict() and
// FSDP::LoadShardedCheckpoint() run it inside their agreed checks.
void RefuseLoadWhileBusy(FSDP& fsdp);

}  // namespace mlframework::distributed::fsdp::detail
