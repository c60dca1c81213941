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

// True when @p lists store a master or a state other than in FP32 (the staged kernels).
bool Staged(const OptimizerStepLists& lists) {
  return lists.Masters != MasterFormat::Float32 || lists.FirstStateFormat != StateFormat::Float32 ||
         lists.SecondStateFormat != StateFormat::Float32;
}

// Pieces of at most kOptimizerChunkElements elements of the checked @p lists, in list order, or
// nullopt when the memory of a tensor with elements is not host memory. @p formats: the lists'
// formats when a master or state is not FP32 (else null).
std::optional<std::vector<OptimizerPiece>> Pieces(const OptimizerStepLists& lists, const StoredFormats* formats) {
  std::vector<OptimizerPiece> pieces;
  const auto& cast = ActiveKernels().cached.cast[Slot(DataType::Float32)];
  const bool fp32_masters = lists.Masters == MasterFormat::Float32;
  const bool fp32_first = lists.FirstStateFormat == StateFormat::Float32;
  const bool fp32_second = lists.SecondStateFormat == StateFormat::Float32;
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
    const auto c1 = HostData(At(lists.FirstStateScales, i));
    const auto c2 = HostData(At(lists.SecondStateScales, i));
    const auto r = HostData(At(lists.ParameterRemainders, i));
    if (!p || !g || !s1 || !s2 || !l || !c1 || !c2 || !r) {
      return std::nullopt;
    }
    const NarrowFn narrow = *l != nullptr ? cast[Slot(low->GetDataType())] : nullptr;
    const std::size_t block = lists.StateBlockSize;
    for (std::size_t begin = 0; begin < size; begin += kOptimizerChunkElements) {
      OptimizerPiece piece{
          .parameter = fp32_masters ? Advance<float>(*p, begin) : nullptr,
          .gradient = Advance<float>(*g, begin),
          .first = fp32_first ? Advance<float>(*s1, begin) : nullptr,
          .second = fp32_second ? Advance<float>(*s2, begin) : nullptr,
          .low_precision = Advance<std::uint16_t>(*l, begin),  // FP16 and BF16 elements are two bytes
          .narrow = narrow,
          .count = size - begin < kOptimizerChunkElements ? size - begin : kOptimizerChunkElements,
          .formats = formats,
      };
      if (formats != nullptr) {
        // Raw pointers of the stored formats, offset to the piece's first element (its first
        // block for the scales); the kernels offset them further by element or block.
        piece.parameter_data = fp32_masters ? nullptr : Advance<std::uint16_t>(*p, begin);
        piece.first_data = fp32_first ? nullptr : *s1;
        piece.second_data = fp32_second ? nullptr : *s2;
        piece.first_scales = Advance<float>(*c1, begin / block);
        piece.second_scales = Advance<float>(*c2, begin / block);
        piece.remainders = Advance<std::uint16_t>(*r, begin);
        piece.tensor = static_cast<std::uint32_t>(i);
        piece.offset = (lists.ElementOffsets.empty() ? 0 : lists.ElementOffsets[i]) + begin;
        if (piece.first_data != nullptr) {
          piece.first_data = static_cast<unsigned char*>(piece.first_data) +
                             begin * ElementSize(StateStorageDType(lists.FirstStateFormat));
        }
        if (piece.second_data != nullptr) {
          piece.second_data = static_cast<unsigned char*>(piece.second_data) +
                              begin * ElementSize(StateStorageDType(lists.SecondStateFormat));
        }
      }
      pieces.push_back(piece);
    }
  }
  return pieces;
}

// Runs kernel(piece, scalars) over the pieces of @p lists; threads (NumThreads()) only for more
// than one piece and kParallelMinElements elements. False when the host cannot address the lists' memory.
template <class Scalars>
bool Run(const OptimizerStepLists& lists, const Scalars& scalars, const DeviceScaleState* skip_if_found_inf,
         void (*kernel)(const OptimizerPiece&, const Scalars&)) {
  const StoredFormats formats{
      .first = lists.FirstStateFormat,
      .second = lists.SecondStateFormat,
      .block_size = lists.StateBlockSize,
      .masters = lists.Masters,
      .seed = lists.RoundingSeed,
      .step = lists.RoundingStep,
      .to_float16 = ActiveKernels().cached.cast[Slot(DataType::Float32)][Slot(DataType::Float16)],
      .native_bf16 =
          ActiveKernels().name == arch::Avx512Bf16::kName || ActiveKernels().name == arch::Avx512Fp16::kName};
  const std::optional<std::vector<OptimizerPiece>> pieces = Pieces(lists, Staged(lists) ? &formats : nullptr);
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
