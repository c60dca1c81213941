// AVX2 optimizer element kernels: the generic loops on xsimd batches of 8 floats, compiled with
// the AVX2 flags only for this file, plus -ffp-contract=off so that the only FMAs are the explicit
// ones where PyTorch's AVX2 kernels fuse (torch's bits) and -fno-math-errno for the scalar tails.

#include <xsimd/xsimd.hpp>

#include "mlframework/backends/cpu/InstructionSets.hpp"
#include "mlframework/backends/cpu/OptimizerElements.hpp"
#include "mlframework/backends/cpu/OptimizerKernels.hpp"

namespace mlframework::backends::cpu {

template <>
const OptimizerKernelTable& OptimizerKernelsOf<arch::Avx2>() noexcept {
  static constexpr OptimizerKernelTable kTable =
      optimizer::MakeOptimizerTable<xsimd::batch<float, xsimd::fma3<xsimd::avx2>>>();
  return kTable;
}

}  // namespace mlframework::backends::cpu
