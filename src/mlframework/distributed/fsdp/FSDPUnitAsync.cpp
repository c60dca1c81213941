// The asynchronous forms of a unit's Gather() and ReduceGradients(): the same two halves,
// with the collective started in between and finished by the wait.
#include <mlframework/distributed/fsdp/FSDPShardingUnit.hpp>

#include <mlframework/core/Error.hpp>

#include "mlframework/distributed/fsdp/UnitImpl.hpp"

namespace mlframework::distributed::fsdp {

void FSDPShardingUnit::GatherAsync() { impl_->StartGather("GatherAsync", true); }

bool FSDPShardingUnit::IsGatherInFlight() const noexcept { return impl_->gather.active; }

void FSDPShardingUnit::WaitGather() {
  if (!impl_->gather.active) {
    throw InvalidOperationError("unit '" + impl_->name + "' has no gather in flight: " +
                                (impl_->is_gathered ? "it was waited for already" : "call GatherAsync() first"));
  }
  impl_->FinishGather();
}

void FSDPShardingUnit::ReduceGradientsAsync(const GradientMap& gradients) {
  impl_->StartReduce("ReduceGradientsAsync", gradients, true);
}

bool FSDPShardingUnit::IsReduceInFlight() const noexcept { return impl_->reduce.active; }

void FSDPShardingUnit::WaitReduce() {
  if (!impl_->reduce.active) {
    throw InvalidOperationError("unit '" + impl_->name +
                                "' has no gradient reduction in flight: call ReduceGradientsAsync() first (each "
                                "reduction is waited for once)");
  }
  impl_->FinishReduce();
}

}  // namespace mlframework::distributed::fsdp
