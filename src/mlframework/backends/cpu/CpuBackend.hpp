#pragma once
// Private: the CPU backend object (CpuTensor.hpp's Backend()).

#include <optional>
#include <span>
#include <string_view>

#include <mlframework/core/HostScaling.hpp>
#include <mlframework/core/TensorBackend.hpp>

#include "mlframework/backends/cpu/Plan.hpp"
#include "mlframework/backends/cpu/PlanCaches.hpp"

namespace mlframework::backends::cpu {

/// The fused kernels over CPU tensors. The whole-list entry points keep the plans of long lists
/// passed again (PlanCaches.hpp, ListCache); the span entry points plan each call.
class CpuBackend final : public HostScalingBackend {  // scaling: host states, these kernels
 public:
  std::string_view Name() const noexcept override { return "cpu"; }

  std::optional<ReadPassResult> Read(TensorListView tensors, const ReadPassOptions& options) const override;
  std::optional<WritePassResult> Write(TensorListView src, TensorListView dst,
                                       const WritePassOptions& options) const override;

  // Fused optimizer steps over host memory, defined in OptimizerKernels.cpp.
  bool AdamStep(const OptimizerStepLists& lists, const AdamStepScalars& scalars,
                const DeviceScaleState* skip_if_found_inf) const override;
  bool SGDStep(const OptimizerStepLists& lists, const SGDStepScalars& scalars,
               const DeviceScaleState* skip_if_found_inf) const override;

  // FP8 kernels (Float8Kernels.hpp), defined in CpuBackendFloat8.cpp.
  void AmaxInto(std::span<const ITensor* const> tensors, ITensor& amax) const override;
  void ScaledCastToFloat8(std::span<const ITensor* const> src, std::span<ITensor* const> dst, const ITensor& scale,
                          ITensor* amax) const override;
  void DequantizeFloat8(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                        const ITensor& scale_inv) const override;

  TensorPtr Allocate(const Shape& shape, DataType dtype, Device device) const override;
  TensorPtr View(const TensorPtr& base, std::size_t offset, const Shape& shape) const override;

 private:
  // The plan of @p tensors when every one is a CPU tensor, or null (an empty list, a null entry,
  // another backend's tensor). A list kept in single_lists_ takes its kept plan.
  std::shared_ptr<const Plan> PlanOfList(std::span<const TensorPtr> tensors) const;
  // The plans of a pair of lists core has checked (TensorListView::Grouped): the kept ones, else
  // new ones, kept in pair_lists_.
  std::shared_ptr<const PairPlans> PairPlansOf(std::span<const TensorPtr> src, std::span<const TensorPtr> dst) const;

  // One cache for the lists of every operation: a step unscales, checks and clips the same list.
  mutable ListCache<Plan> single_lists_;
  mutable ListCache<PairPlans> pair_lists_;
};

}  // namespace mlframework::backends::cpu
