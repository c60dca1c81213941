#include "mlframework/backends/cpu/Planning.hpp"

#include <exception>
#include <utility>
#include <vector>

#include <omp.h>

#include <mlframework/backends/cpu/CpuTensor.hpp>

#include "mlframework/backends/cpu/AddressOrder.hpp"
#include "mlframework/backends/cpu/CpuTensorImpl.hpp"
#include "mlframework/core/TensorListWalk.hpp"

namespace mlframework::backends::cpu {

namespace {

using mlframework::detail::kObjectPrefetchAhead;

// The CpuTensor at one entry of a list. The callers pass only tensors whose Backend() is this
// one, which are CpuTensors (a final class): one virtual call per tensor instead of a
// dynamic_cast and three more virtual calls, which showed in lists of thousands of small
// tensors. Of a backend call, anything else gets the checked accessor's clear error; of a list
// as its caller holds it, NotCpuList.
const CpuTensor& CpuTensorAt(const ITensor* tensor, const TensorBackend* self) {
  if (tensor->Backend() != self) {
    (void)Data(*tensor);  // throws ArgumentError naming the tensor's device
  }
  return static_cast<const CpuTensor&>(*tensor);
}
const CpuTensor& CpuTensorAt(const TensorPtr& tensor, const TensorBackend* self) {
  if (!tensor || tensor->Backend() != self) {
    throw NotCpuList{};
  }
  return static_cast<const CpuTensor&>(*tensor);
}
const ITensor* Raw(const ITensor* tensor) { return tensor; }
const ITensor* Raw(const TensorPtr& tensor) { return tensor.get(); }

Segment SegmentOf(const CpuTensor& tensor) {
  return Segment{static_cast<std::byte*>(const_cast<void*>(tensor.Data())), tensor.GetDataType()};
}

// plan_range(first, last) over contiguous ranges of [0, count), one a thread, in list order.
// An exception must not leave the OpenMP region: the first one in list order is rethrown after it.
template <typename Part, typename PlanRange>
std::vector<Part> PlanInParts(std::size_t count, const PlanRange& plan_range) {
  const int max_threads = mlframework::NumThreads();
  std::vector<Part> parts(static_cast<std::size_t>(max_threads));
  std::vector<std::exception_ptr> errors(parts.size());
#pragma omp parallel num_threads(max_threads)
  {
    const auto threads = static_cast<std::size_t>(omp_get_num_threads());
    const auto t = static_cast<std::size_t>(omp_get_thread_num());
    try {
      parts[t] = plan_range(count * t / threads, count * (t + 1) / threads);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  }
  for (const std::exception_ptr& error : errors) {
    if (error) {
      std::rethrow_exception(error);
    }
  }
  return parts;
}

// The plan of one list, in list order.
template <typename TensorPointer>
Plan MakePlan(std::span<TensorPointer const> tensors) {
  const TensorBackend* self = &Backend();
  const auto plan_range = [&](std::size_t first, std::size_t last) {
    Plan part(last - first);
    for (std::size_t i = first; i < last; ++i) {
      if (i + kObjectPrefetchAhead < tensors.size()) {
        __builtin_prefetch(Raw(tensors[i + kObjectPrefetchAhead]));  // see kObjectPrefetchAhead
      }
      const CpuTensor& tensor = CpuTensorAt(tensors[i], self);
      const Segment segment = SegmentOf(tensor);
      part.Append(segment, tensor.Size(), part.Continues(segment));
    }
    return part;
  };
  Plan plan;
  if (!PlanInParallel(tensors.size())) {
    plan = plan_range(0, tensors.size());
  } else {
    plan = Plan(tensors.size());
    for (const Plan& part : PlanInParts<Plan>(tensors.size(), plan_range)) {
      plan.Append(part, plan.ContinuedBy(part));
    }
  }
  plan.Finish();
  return plan;
}

// The plans of a source and a destination list of the same sizes, in list order: a pair of
// tensors joins the previous pair only when both sides do, so segment s of one plan matches
// segment s of the other.
template <typename SrcPointer, typename DstPointer>
PairPlans MakePairPlans(std::span<SrcPointer const> src, std::span<DstPointer const> dst) {
  const TensorBackend* self = &Backend();
  const auto plan_range = [&](std::size_t first, std::size_t last) {
    PairPlans part{Plan(last - first), Plan(last - first)};
    for (std::size_t i = first; i < last; ++i) {
      if (i + kObjectPrefetchAhead < src.size()) {
        __builtin_prefetch(Raw(src[i + kObjectPrefetchAhead]));
        __builtin_prefetch(Raw(dst[i + kObjectPrefetchAhead]));
      }
      const CpuTensor& in = CpuTensorAt(src[i], self);
      const CpuTensor& out = CpuTensorAt(dst[i], self);
      const Segment in_segment = SegmentOf(in);
      const Segment out_segment = SegmentOf(out);
      const bool join = part.first.Continues(in_segment) && part.second.Continues(out_segment);
      part.first.Append(in_segment, in.Size(), join);
      part.second.Append(out_segment, out.Size(), join);
    }
    return part;
  };
  PairPlans plans;
  if (!PlanInParallel(src.size())) {
    plans = plan_range(0, src.size());
  } else {
    plans = {Plan(src.size()), Plan(dst.size())};
    for (const auto& part : PlanInParts<PairPlans>(src.size(), plan_range)) {
      const bool join = plans.first.ContinuedBy(part.first) && plans.second.ContinuedBy(part.second);
      plans.first.Append(part.first, join);
      plans.second.Append(part.second, join);
    }
  }
  plans.first.Finish();
  plans.second.Finish();
  return plans;
}

template <typename TensorPointer>
std::shared_ptr<const Plan> OrderedPlanOf(std::span<TensorPointer const> tensors) {
  Plan plan = MakePlan(tensors);
  if (!FromMemory(plan.bytes)) {
    return std::make_shared<const Plan>(std::move(plan));
  }
  return OrderedByAddress(std::move(plan));
}

template <typename SrcPointer, typename DstPointer>
std::shared_ptr<const PairPlans> OrderedPlansOf(std::span<SrcPointer const> src, std::span<DstPointer const> dst) {
  PairPlans plans = MakePairPlans(src, dst);
  if (!FromMemory(plans.first.bytes + plans.second.bytes)) {
    return std::make_shared<const PairPlans>(std::move(plans));
  }
  return OrderedByAddress(std::move(plans));
}

}  // namespace

std::shared_ptr<const Plan> PlanOf(std::span<ITensor* const> tensors) { return OrderedPlanOf(tensors); }

std::shared_ptr<const Plan> PlanOf(std::span<const ITensor* const> tensors) { return OrderedPlanOf(tensors); }

std::shared_ptr<const Plan> PlanOf(std::span<const TensorPtr> tensors) { return OrderedPlanOf(tensors); }

std::shared_ptr<const PairPlans> PlansOf(std::span<const ITensor* const> src, std::span<ITensor* const> dst) {
  return OrderedPlansOf(src, dst);
}

std::shared_ptr<const PairPlans> PlansOf(std::span<const TensorPtr> src, std::span<const TensorPtr> dst) {
  return OrderedPlansOf(src, dst);
}

}  // namespace mlframework::backends::cpu
