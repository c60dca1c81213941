// FSDP's module hooks: the overlapped schedule (PrefetchPolicy) over the units' asynchronous
// Gather and ReduceGradients. Only the units' public API is used here; every collective the
// hooks start is a unit collective, agreed and ordered as the unit documents.
#include <mlframework/distributed/fsdp/FSDP.hpp>

#include <string>

#include <mlframework/core/Error.hpp>

#include "mlframework/distributed/fsdp/Hooks.hpp"

namespace mlframework::distributed::fsdp {

namespace {

// On return @p unit is gathered: its prefetched gather is waited for, else it is gathered now.
void EnsureGathered(FSDPShardingUnit& unit) {
  if (unit.IsGatherInFlight()) {
    unit.WaitGather();
  } else if (!unit.IsGathered()) {
    unit.Gather();
  }
}

// Starts the gather of @p unit unless it is gathered or on its way: at most the current unit
// and this one are gathered at a time (the memory bound of PrefetchPolicy).
void Prefetch(FSDPShardingUnit& unit) {
  if (!unit.IsGathered() && !unit.IsGatherInFlight()) unit.GatherAsync();
}

}  // namespace

void detail::RefuseReductionsInFlight(FSDP& fsdp) {
  for (std::size_t i = 0; i < fsdp.UnitCount(); ++i) {
    FSDPShardingUnit& unit = fsdp.Unit(i);
    if (unit.IsReduceInFlight()) {
      throw InvalidOperationError("unit '" + unit.Name() +
                                  "' has a gradient reduction in flight: call FSDP::FinishBackward() (or the unit's "
                                  "WaitReduce()) first");
    }
  }
}

void detail::RefuseLoadWhileBusy(FSDP& fsdp) {
  for (std::size_t i = 0; i < fsdp.UnitCount(); ++i) {
    const FSDPShardingUnit& unit = fsdp.Unit(i);
    if (unit.IsGathered() || unit.IsGatherInFlight()) {
      throw InvalidOperationError("unit '" + unit.Name() + "' is " +
                                  (unit.IsGathered() ? "gathered: release it" : "being gathered: call WaitGather()") +
                                  " before loading");
    }
    if (unit.HasUnsyncedGradients()) {
      throw InvalidOperationError("unit '" + unit.Name() +
                                  "' holds gradients accumulated without sync: finish the step first");
    }
  }
  RefuseReductionsInFlight(fsdp);
}

void FSDP::SetPrefetch(PrefetchPolicy policy) noexcept { prefetch_ = policy; }

const PrefetchPolicy& FSDP::Prefetch() const noexcept { return prefetch_; }

void FSDP::PreForward(std::size_t unit) {
  FSDPShardingUnit& current = Unit(unit);
  if (kept_after_forward_ < UnitCount() && kept_after_forward_ != unit) {
    // A new forward began without the backward that would have used the kept unit: it goes,
    // so that at most two units are gathered.
    FSDPShardingUnit& kept = Unit(kept_after_forward_);
    if (kept.IsGathered()) kept.Release();
  }
  kept_after_forward_ = static_cast<std::size_t>(-1);
  if (prefetch_.Forward) {
    // The next unit's gather starts before this one is waited for: its start (the agreement,
    // and the cast into the send slot on engines that run it on the calling thread) then
    // overlaps this unit's all-gather instead of adding to the step after it.
    fsdp::Prefetch(current);
    if (unit + 1 < UnitCount()) fsdp::Prefetch(Unit(unit + 1));
  }
  EnsureGathered(current);
}

void FSDP::PostForward(std::size_t unit) {
  FSDPShardingUnit& current = Unit(unit);
  if (!current.IsGathered()) return;
  if (prefetch_.Backward && unit + 1 == UnitCount()) {
    // Its backward is next: releasing it here would make PreBackward() gather it again, with
    // nothing to overlap that gather. Kept, it is one of the two units PreBackward() allows.
    kept_after_forward_ = unit;
    return;
  }
  current.Release();
}

void FSDP::PreBackward(std::size_t unit) {
  FSDPShardingUnit& current = Unit(unit);
  kept_after_forward_ = static_cast<std::size_t>(-1);  // in use now; PostBackward() releases it
  if (prefetch_.Backward) {
    // As in PreForward(): the previous unit's gather starts before this one is waited for.
    fsdp::Prefetch(current);
    if (unit > 0) fsdp::Prefetch(Unit(unit - 1));
  }
  EnsureGathered(current);
}

void FSDP::PostBackward(std::size_t unit, const GradientMap& gradients) {
  FSDPShardingUnit& current = Unit(unit);
  if (prefetch_.Backward) {
    // Reductions started by earlier PostBackward() calls (higher indices) are waited for,
    // oldest first, until fewer than the policy's limit remain in flight.
    std::size_t in_flight = 0;
    for (std::size_t i = unit + 1; i < UnitCount(); ++i) in_flight += Unit(i).IsReduceInFlight() ? 1 : 0;
    for (std::size_t i = UnitCount(); i-- > unit + 1 && in_flight >= 2;) {
      if (Unit(i).IsReduceInFlight()) {
        Unit(i).WaitReduce();
        --in_flight;
      }
    }
    current.ReduceGradientsAsync(gradients);
  } else {
    current.ReduceGradients(gradients);
  }
  current.Release();
}

void FSDP::FinishBackward() {
  // Highest index first: backward started the reductions in that order.
  for (std::size_t i = UnitCount(); i-- > 0;) {
    FSDPShardingUnit& unit = Unit(i);
    if (unit.IsReduceInFlight()) unit.WaitReduce();
  }
}

}  // namespace mlframework::distributed::fsdp
