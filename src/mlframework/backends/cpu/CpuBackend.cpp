#include "mlframework/backends/cpu/CpuBackend.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/Threads.hpp>

#include "mlframework/backends/cpu/KernelTable.hpp"
#include "mlframework/backends/cpu/MultiTensorKernels.hpp"
#include "mlframework/backends/cpu/Planning.hpp"
#include "mlframework/backends/cpu/ScalarElements.hpp"
#include "mlframework/core/DeviceFactory.hpp"

namespace mlframework::backends::cpu {

namespace {

// dst = dst + alpha * src, one dtype dispatch per pair. The product goes through a block
// buffer, so it is rounded to FP32 before the sum (as on CUDA) and never contracted into an FMA.
void AddPair(const ITensor& src_tensor, ITensor& dst_tensor, float alpha) {
  const void* src = Data(src_tensor);
  void* dst = MutableData(dst_tensor);
  const auto size = static_cast<std::int64_t>(dst_tensor.Size());
  constexpr std::int64_t kBlock = 1024;
  scalar::DispatchDtype(src_tensor.GetDataType(), [&]<DataType S>() {
    scalar::DispatchDtype(dst_tensor.GetDataType(), [&]<DataType D>() {
#pragma omp parallel for schedule(static) num_threads(mlframework::NumThreads()) if (size > 16 * kBlock)
      for (std::int64_t begin = 0; begin < size; begin += kBlock) {
        const std::int64_t end = std::min(size, begin + kBlock);
        std::array<float, kBlock> product;
        const auto first = static_cast<std::size_t>(begin);
        const auto count = static_cast<std::size_t>(end - begin);
        for (std::size_t i = 0; i < count; ++i) product[i] = alpha * scalar::Load<S>(src, first + i);
        for (std::size_t i = 0; i < count; ++i) {
          scalar::Store<D>(dst, first + i, scalar::Load<D>(dst, first + i) + product[i]);
        }
      }
    });
  });
}

// True when @p tensor is a CPU tensor: a list that starts with another kind is not walked.
bool IsCpuEntry(const TensorPtr& tensor) { return tensor && tensor->Backend() == &Backend(); }

// The error of the first entry of a list handed over as grouped that is not a CPU tensor:
// ArgumentNullError naming `tensors[i]`, or the ArgumentError of Data() naming its device.
void RequireCpuList(std::span<const TensorPtr> tensors) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i]) {
      throw ArgumentNullError("tensors[" + std::to_string(i) + "]");
    }
    (void)Data(*tensors[i]);
  }
}

}  // namespace

bool CpuBackend::UnscaleAndCheck(std::span<ITensor* const> tensors, float factor) const {
  return UnscaleAndCheckKernel(tensors, factor);
}

void CpuBackend::Scale(std::span<ITensor* const> tensors, float factor) const { ScaleKernel(tensors, factor); }

bool CpuBackend::CastInto(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float factor) const {
  return CastIntoKernel(src, dst, factor);
}

void CpuBackend::AddInto(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float alpha) const {
  for (std::size_t t = 0; t < src.size(); ++t) AddPair(*src[t], *dst[t], alpha);
}

std::shared_ptr<const Plan> CpuBackend::PlanOfList(std::span<const TensorPtr> tensors) const {
  if (tensors.empty()) {
    return nullptr;
  }
  const TensorLists lists{tensors, {}};
  if (std::shared_ptr<const Plan> plan = single_lists_.Find(lists)) {
    return plan;
  }
  if (!IsCpuEntry(tensors.front())) {
    return nullptr;
  }
  std::shared_ptr<const Plan> plan;
  try {
    plan = PlanOf(tensors);
  } catch (const NotCpuList&) {
    return nullptr;
  }
  single_lists_.Add(lists, plan);
  return plan;
}

std::optional<bool> CpuBackend::UnscaleAndCheckList(std::span<const TensorPtr> tensors, float factor) const {
  const auto plan = PlanOfList(tensors);
  return plan ? std::optional(UnscaleAndCheckKernel(*plan, factor)) : std::nullopt;
}

std::optional<ReadPassResult> CpuBackend::Read(TensorListView tensors, const ReadPassOptions& options) const {
  ValidateReadPassOptions(options);
  const auto plan = PlanOfList(tensors.Tensors);
  if (!plan) {
    if (!tensors.Grouped) {
      return std::nullopt;
    }
    // A grouped list holds CPU tensors only: the empty one plans to nothing.
    RequireCpuList(tensors.Tensors);
    return ReadPassResult{};
  }
  if (options.Amax) {
    const NonFiniteAndAmax result = CheckAndAmaxKernel(*plan);
    return ReadPassResult{.FoundNonFinite = result.FoundNonFinite, .Amax = result.Amax};
  }
  if (options.SumOfSquares) {
    const NonFiniteAndNorm result = CheckAndSumSquaresKernel(*plan, options.Factor);
    return ReadPassResult{.FoundNonFinite = result.FoundNonFinite, .SumOfSquares = result.SumOfSquares};
  }
  return ReadPassResult{.FoundNonFinite = HasNonFiniteKernel(*plan)};
}

bool CpuBackend::ScaleList(std::span<const TensorPtr> tensors, float factor) const {
  const auto plan = PlanOfList(tensors);
  if (plan) {
    ScaleKernel(*plan, factor);
  }
  return plan != nullptr;
}

std::optional<bool> CpuBackend::CastIntoKnownLists(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                                                   float factor) const {
  if (src.empty()) {
    return std::nullopt;
  }
  // Kept lists passed every check of CastInto; ListKey::Matches proves them again for these
  // (CPU tensors over the same memory, the same shapes pairwise).
  if (const std::shared_ptr<const PairPlans> plans = pair_lists_.Find({src, dst})) {
    return CastKernel(*plans, factor);
  }
  return std::nullopt;
}

std::shared_ptr<const PairPlans> CpuBackend::NewPairPlans(std::span<const TensorPtr> src,
                                                          std::span<const TensorPtr> dst) const {
  if (src.empty() || src.size() != dst.size() || !IsCpuEntry(src.front()) || !IsCpuEntry(dst.front())) {
    return nullptr;
  }
  std::shared_ptr<const PairPlans> plans;
  try {
    plans = PlansOf(src, dst);
  } catch (const NotCpuList&) {
    return nullptr;
  }
  pair_lists_.Add({src, dst}, plans);
  return plans;
}

std::optional<bool> CpuBackend::CastIntoLists(std::span<const TensorPtr> src, std::span<const TensorPtr> dst,
                                              float factor) const {
  const auto plans = NewPairPlans(src, dst);
  return plans ? std::optional(CastKernel(*plans, factor)) : std::nullopt;
}

NonFiniteAndAmax CpuBackend::UnscaleCheckAndAmax(std::span<ITensor* const> tensors, float factor) const {
  return UnscaleCheckAndAmaxKernel(tensors, factor);
}

NonFiniteAndAmax CpuBackend::CastIntoAndAmax(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                             float factor) const {
  return CastIntoAndAmaxKernel(src, dst, factor);
}

std::optional<NonFiniteAndAmax> CpuBackend::UnscaleCheckAndAmaxList(std::span<const TensorPtr> tensors,
                                                                    float factor) const {
  const auto plan = PlanOfList(tensors);
  return plan ? std::optional(UnscaleCheckAndAmaxKernel(*plan, factor)) : std::nullopt;
}

std::optional<NonFiniteAndAmax> CpuBackend::CastIntoAndAmaxLists(std::span<const TensorPtr> src,
                                                                 std::span<const TensorPtr> dst, float factor) const {
  if (src.empty() || src.size() != dst.size()) {
    return std::nullopt;
  }
  // The pair cache the plain cast keeps: a step's cast lists are planned once for both forms.
  std::shared_ptr<const PairPlans> plans = pair_lists_.Find({src, dst});
  if (!plans) {
    plans = NewPairPlans(src, dst);
  }
  return plans ? std::optional(CastAndAmaxKernel(*plans, factor)) : std::nullopt;
}

TensorPtr CpuBackend::Allocate(const Shape& shape, DataType dtype, Device device) const {
  if (!device.IsCPU()) throw ArgumentError("device", "the cpu backend allocates on cpu, got " + device.ToString());
  return Empty(shape, dtype);
}

TensorPtr CpuBackend::View(const TensorPtr& base, std::size_t offset, const Shape& shape) const {
  return cpu::View(base, offset, shape);
}

const TensorBackend& Backend() noexcept {
  static const CpuBackend kBackend;
  return kBackend;
}

std::string_view InstructionSet() noexcept { return ActiveKernels().name; }

}  // namespace mlframework::backends::cpu
