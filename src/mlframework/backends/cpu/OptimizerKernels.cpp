// The drivers of the fused optimizer steps: a list is cut into pieces of at most
// kOptimizerChunkElements elements (a piece never spans two tensors), and OpenMP threads take the
// pieces in a static schedule. Every element's result depends on that element alone, so the bits
// do not depend on the thread count or on the cut.

#include "mlframework/backends/cpu/OptimizerKernels.hpp"

#include <string_view>
#include <vector>

#include <omp.h>

#include "mlframework/backends/cpu/KernelTable.hpp"

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

// Pieces of at most kOptimizerChunkElements elements, in list order.
std::vector<OptimizerPiece> Pieces(std::span<const OptimizerTensor> tensors) {
  std::vector<OptimizerPiece> pieces;
  const auto& cast = ActiveKernels().cached.cast[Slot(DataType::Float32)];
  for (const OptimizerTensor& t : tensors) {
    const NarrowFn narrow = t.low_precision != nullptr ? cast[Slot(t.low_precision_dtype)] : nullptr;
    for (std::size_t begin = 0; begin < t.count; begin += kOptimizerChunkElements) {
      const std::size_t count = t.count - begin < kOptimizerChunkElements ? t.count - begin : kOptimizerChunkElements;
      pieces.push_back(OptimizerPiece{
          .parameter = t.parameter + begin,
          .gradient = t.gradient + begin,
          .first = t.first != nullptr ? t.first + begin : nullptr,
          .second = t.second != nullptr ? t.second + begin : nullptr,
          // FP16 and BF16 elements are two bytes.
          .low_precision =
              t.low_precision != nullptr ? static_cast<unsigned char*>(t.low_precision) + 2 * begin : nullptr,
          .narrow = narrow,
          .count = count,
      });
    }
  }
  return pieces;
}

// Runs kernel(piece, scalars) over every piece; threads only when there is more than one piece.
template <class Scalars>
void Run(std::span<const OptimizerTensor> tensors, const Scalars& scalars,
         void (*kernel)(const OptimizerPiece&, const Scalars&)) {
  const std::vector<OptimizerPiece> pieces = Pieces(tensors);
  const auto count = static_cast<std::ptrdiff_t>(pieces.size());
#pragma omp parallel for schedule(static) if (count > 1 && omp_get_max_threads() > 1)
  for (std::ptrdiff_t p = 0; p < count; ++p) {
    kernel(pieces[static_cast<std::size_t>(p)], scalars);
  }
}

}  // namespace

}  // namespace mlframework::backends::cpu

namespace mlframework::detail {

void HostAdamStep(std::span<const HostOptimizerTensor> tensors, const AdamStepScalars& scalars) {
  backends::cpu::Run(tensors, scalars, backends::cpu::ActiveOptimizerKernels().adam);
}

void HostSGDStep(std::span<const HostOptimizerTensor> tensors, const SGDStepScalars& scalars) {
  backends::cpu::Run(tensors, scalars, backends::cpu::ActiveOptimizerKernels().sgd);
}

}  // namespace mlframework::detail
