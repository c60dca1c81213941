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

std::optional<ReadPassResult> CpuBackend::Read(TensorListView tensors, const ReadPassOptions& options) const {
  ValidateReadPassOptions(options);
  RejectScaleState(options.State, *this);
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

std::shared_ptr<const PairPlans> CpuBackend::PairPlansOf(std::span<const TensorPtr> src,
                                                         std::span<const TensorPtr> dst) const {
  if (std::shared_ptr<const PairPlans> plans = pair_lists_.Find({src, dst})) {
    return plans;
  }
  std::shared_ptr<const PairPlans> plans;
  try {
    plans = PlansOf(src, dst);
  } catch (const NotCpuList&) {
    RequireCpuList(src);  // the ArgumentError of the first entry that is not a CPU tensor
    RequireCpuList(dst);
    throw;
  }
  pair_lists_.Add({src, dst}, plans);
  return plans;
}

// In place, a list is planned (and kept) in the walk that checks it, whether core has grouped it
// or not; a pair of lists is run before core's checks only when it was kept (ListKey::Matches
// proves it again: CPU tensors over the same memory, the same shapes pairwise), since planning
// does not compare shapes.
std::optional<WritePassResult> CpuBackend::Write(TensorListView src, TensorListView dst,
                                                 const WritePassOptions& options) const {
  ValidateWritePassOptions(options);
  RejectScaleState(options.State, *this);
  const float factor = options.Factor;
  if (options.Op == WriteOp::Scale) {
    const auto plan = PlanOfList(src.Tensors);
    if (!plan) {
      if (!src.Grouped) {
        return std::nullopt;
      }
      RequireCpuList(src.Tensors);
      return WritePassResult{};
    }
    if (options.Amax) {
      const NonFiniteAndAmax result = UnscaleCheckAndAmaxKernel(*plan, factor);
      return WritePassResult{.FoundNonFinite = result.FoundNonFinite, .Amax = result.Amax};
    }
    if (options.Check) {
      return WritePassResult{.FoundNonFinite = UnscaleAndCheckKernel(*plan, factor)};
    }
    ScaleKernel(*plan, factor);
    return WritePassResult{};
  }
  if (options.Op == WriteOp::Add) {
    if (!src.Grouped) {
      return std::nullopt;
    }
    for (std::size_t t = 0; t < src.Tensors.size(); ++t) AddPair(*src.Tensors[t], *dst.Tensors[t], factor);
    return WritePassResult{};
  }
  std::shared_ptr<const PairPlans> plans;
  if (src.Grouped) {
    if (src.Tensors.empty()) {
      return WritePassResult{};
    }
    plans = PairPlansOf(src.Tensors, dst.Tensors);
  } else if (!src.Tensors.empty()) {
    plans = pair_lists_.Find({src.Tensors, dst.Tensors});
  }
  if (!plans) {
    return std::nullopt;
  }
  if (options.Amax) {
    const NonFiniteAndAmax result = CastAndAmaxKernel(*plans, factor);
    return WritePassResult{.FoundNonFinite = result.FoundNonFinite, .Amax = result.Amax};
  }
  // The kernel checks what it writes in the same pass; without Check the flag is dropped.
  const bool found = CastKernel(*plans, factor);
  return WritePassResult{.FoundNonFinite = options.Check && found};
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
