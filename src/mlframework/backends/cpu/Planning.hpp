#pragma once
// Private: planning a list of CPU tensors (Plan.hpp), in address order for calls from memory.

#include <cstddef>
#include <memory>
#include <span>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/Threads.hpp>

#include "mlframework/backends/cpu/Plan.hpp"
#include "mlframework/core/TensorListWalk.hpp"

namespace mlframework::backends::cpu {

/// Thrown by the planning of a list as its caller holds it (TensorPtr entries) at a null tensor
/// or one of another backend: the caller then takes its general path, which reports or groups those.
struct NotCpuList {};

/// True when a list of @p tensors is walked on the library's threads (kParallelWalkTensors, NumThreads()).
inline bool PlanInParallel(std::size_t tensors) {
  return tensors >= mlframework::detail::kParallelWalkTensors && mlframework::NumThreads() > 1;
}

/// The plan of an operation over @p tensors, in address order for calls from memory
/// (AddressOrder.hpp). Every tensor is a tensor of the CPU backend (ArgumentError otherwise).
std::shared_ptr<const Plan> PlanOf(std::span<ITensor* const> tensors);
std::shared_ptr<const Plan> PlanOf(std::span<const ITensor* const> tensors);
/// The same for a list as its caller holds it: NotCpuList at an entry that is null or not a CPU
/// tensor.
std::shared_ptr<const Plan> PlanOf(std::span<const TensorPtr> tensors);

/// The plans of a cast from @p src into @p dst (the same sizes pairwise, checked by the caller),
/// in the source's address order for calls from memory (source and destination bytes together,
/// as the kernels count them). A pair of tensors joins the previous pair only when both sides do.
std::shared_ptr<const PairPlans> PlansOf(std::span<const ITensor* const> src, std::span<ITensor* const> dst);
/// The same for lists as their caller holds them (see PlanOf).
std::shared_ptr<const PairPlans> PlansOf(std::span<const TensorPtr> src, std::span<const TensorPtr> dst);

}  // namespace mlframework::backends::cpu
