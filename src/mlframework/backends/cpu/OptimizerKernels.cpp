// The drivers of the fused optimizer steps: a list is cut into pieces of at most
// kOptimizerChunkElements elements (a piece never spans two tensors), and OpenMP threads take the
// pieces in a static schedule. Every element's result depends on that element alone, so the bits
// do not depend on the thread count or on the cut.

#include "mlframework/backends/cpu/OptimizerKernels.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <mlframework/core/DeviceScaling.hpp>

#include "mlframework/backends/cpu/CpuBackend.hpp"
#include "mlframework/backends/cpu/KernelTable.hpp"
#include "mlframework/core/ParallelWork.hpp"

namespace mlframework::backends::cpu {

const OptimizerKernelTable& ActiveOptimizerKernels() noexcept {
  static const OptimizerKernelTable& active = []() -> const OptimizerKernelTable& {
#if defined(MLFW_CPU_X86_KERNELS)
    // The tables follow the instruction set the element kernels run (MLFW_CPU_ISA included):
    // every AVX-512 tag has the AVX-512 F math these loops need.
    const std::string_view name = ActiveKernels().name;
    if (name.starts_with("avx512")) {
      return OptimizerKernelsOf<arch::Avx512>();
    }
    if (name == arch::Avx2::kName) {
      return OptimizerKernelsOf<arch::Avx2>();
    }
#endif
    return OptimizerKernelsOf<arch::Portable>();
  }();
  return active;
}

namespace {

// The host elements of @p tensor: null for a null entry, nullopt when the host cannot address them.
std::optional<void*> HostData(const TensorPtr& tensor) {
  if (!tensor) {
    return nullptr;
  }
  const std::span<const std::byte> bytes = tensor->HostBytes();
  if (bytes.empty()) {
    return std::nullopt;
  }
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): MutableHostBytes() of the same memory
  return const_cast<ITensor&>(*tensor).MutableHostBytes().data();
}

// Entry i of @p list (an empty list: none).
const TensorPtr& At(std::span<const TensorPtr> list, std::size_t i) {
  static const TensorPtr kNone;
  return list.empty() ? kNone : list[i];
}

// @p data (elements of T) from element @p begin on; null stays null.
template <typename T>
T* Advance(void* data, std::size_t begin) {
  return data != nullptr ? static_cast<T*>(data) + begin : nullptr;
}

// Pieces of at most kOptimizerChunkElements elements of the checked @p lists, in list order, or
// nullopt when the memory of a tensor with elements is not host memory.
std::optional<std::vector<OptimizerPiece>> Pieces(const OptimizerStepLists& lists) {
  std::vector<OptimizerPiece> pieces;
  const auto& cast = ActiveKernels().cached.cast[Slot(DataType::Float32)];
  for (std::size_t i = 0; i < lists.Parameters.size(); ++i) {
    const std::size_t size = lists.Parameters[i]->Size();
    if (size == 0) {
      continue;
    }
    const TensorPtr& low = At(lists.LowPrecisionCopies, i);
    const auto p = HostData(lists.Parameters[i]);
    const auto g = HostData(lists.Gradients[i]);
    const auto s1 = HostData(At(lists.FirstState, i));
    const auto s2 = HostData(At(lists.SecondState, i));
    const auto l = HostData(low);
    if (!p || !g || !s1 || !s2 || !l) {
      return std::nullopt;
    }
    const NarrowFn narrow = *l != nullptr ? cast[Slot(low->GetDataType())] : nullptr;
    for (std::size_t begin = 0; begin < size; begin += kOptimizerChunkElements) {
      pieces.push_back(OptimizerPiece{
          .parameter = Advance<float>(*p, begin),
          .gradient = Advance<float>(*g, begin),
          .first = Advance<float>(*s1, begin),
          .second = Advance<float>(*s2, begin),
          .low_precision = Advance<std::uint16_t>(*l, begin),  // FP16 and BF16 elements are two bytes
          .narrow = narrow,
          .count = size - begin < kOptimizerChunkElements ? size - begin : kOptimizerChunkElements,
      });
    }
  }
  return pieces;
}

// Runs kernel(piece, scalars) over the pieces of @p lists; threads (NumThreads()) only for more
// than one piece and kParallelMinElements elements. False when the host cannot address the lists' memory.
template <class Scalars>
bool Run(const OptimizerStepLists& lists, const Scalars& scalars, const DeviceScaleState* skip_if_found_inf,
         void (*kernel)(const OptimizerPiece&, const Scalars&)) {
  const std::optional<std::vector<OptimizerPiece>> pieces = Pieces(lists);
  if (!pieces) {
    return false;
  }
  if (skip_if_found_inf != nullptr && skip_if_found_inf->FoundInf()) {
    return true;
  }
  const auto count = static_cast<std::ptrdiff_t>(pieces->size());
  std::size_t elements = 0;
  for (const OptimizerPiece& piece : *pieces) {
    elements += piece.count;
  }
  const int threads = count > 1 ? mlframework::detail::RegionThreads(elements) : 1;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (std::ptrdiff_t p = 0; p < count; ++p) {
    kernel((*pieces)[static_cast<std::size_t>(p)], scalars);
  }
  return true;
}

}  // namespace

bool CpuBackend::AdamStep(const OptimizerStepLists& lists, const AdamStepScalars& scalars,
                          const DeviceScaleState* skip_if_found_inf) const {
  return Run(lists, scalars, skip_if_found_inf, ActiveOptimizerKernels().adam);
}

bool CpuBackend::SGDStep(const OptimizerStepLists& lists, const SGDStepScalars& scalars,
                         const DeviceScaleState* skip_if_found_inf) const {
  return Run(lists, scalars, skip_if_found_inf, ActiveOptimizerKernels().sgd);
}

}  // namespace mlframework::backends::cpu
