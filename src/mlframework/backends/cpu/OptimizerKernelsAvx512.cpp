// AVX-512 optimizer element kernels: the generic loops on xsimd batches of 16 floats (VSQRTPS,
// VDIVPS, VFMADD), compiled with the AVX-512 flags only for this file, plus -ffp-contract=off
// (FMAs only where PyTorch's AVX-512 kernels fuse: torch's bits) and -fno-math-errno for the
// scalar tails.

#include <xsimd/xsimd.hpp>

#include "mlframework/backends/cpu/InstructionSets.hpp"
#include "mlframework/backends/cpu/OptimizerElements.hpp"
#include "mlframework/backends/cpu/OptimizerKernels.hpp"

namespace mlframework::backends::cpu {

template <>
const OptimizerKernelTable& OptimizerKernelsOf<arch::Avx512>() noexcept {
  static constexpr OptimizerKernelTable kTable = optimizer::MakeOptimizerTable<xsimd::batch<float, xsimd::avx512bw>>();
  return kTable;
}

}  // namespace mlframework::backends::cpu
