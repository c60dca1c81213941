#pragma once
// Private: checks shared by FSDP.cpp and the hooks (FSDPHooks.cpp).

#include <mlframework/distributed/fsdp/FSDP.hpp>

namespace mlframework::distributed::fsdp::detail {

// InvalidOperationError (local) naming the first unit with a gradient reduction in flight: the
// norm and the step read every gradient shard, a checkpoint load drops them. Callers run it
// inside an agreed check.
void RefuseReductionsInFlight(FSDP& fsdp);

}  // namespace mlframework::distributed::fsdp::detail
