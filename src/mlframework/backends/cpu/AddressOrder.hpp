#pragma once
// Private: plans visited in address order.
//
// A list's order says nothing about where its tensors lie: gradients are often allocated in
// the backward pass, last layer first, and a GradientMap lists them by name. Streaming
// separately allocated tensors from memory in descending address order ran 1.1-2.3x slower
// than in ascending order on an EPYC host: each tensor's lines are a new stream to the hardware
// prefetcher, and the software prefetch past a tensor's end finds the next tensor only when
// that one lies above it. So every operation visits a long list from memory in address order.
// The element-wise results and the non-finite flag do not depend on the order. The sum of
// squares does, in its last bits: where its FP32 partials are cut already depends on the layout
// (tensors joined because they lie back to back), and also on the order in memory. For one list
// in one layout it is the same on every call and for every thread count.

#include <memory>

#include "mlframework/backends/cpu/Plan.hpp"

namespace mlframework::backends::cpu {

/// @p plans (a finished plan, or a cast's pair ordered by its source) in address order, joined
/// where segments now lie back to back. A plan of the same layout as one ordered recently takes
/// that one's result from a cache (PlanCaches.hpp, OrderCache).
std::shared_ptr<const Plan> OrderedByAddress(Plan plan);
std::shared_ptr<const PairPlans> OrderedByAddress(PairPlans plans);

}  // namespace mlframework::backends::cpu
