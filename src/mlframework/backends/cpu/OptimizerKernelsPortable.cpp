// Portable optimizer element kernels: the generic loops on float. This file is compiled with
// -fno-math-errno (std::sqrt is the SQRTSS/SQRTPS instruction, so the compiler vectorises the
// loops for the baseline instruction set) and -ffp-contract=off: no FMA, as PyTorch's default
// (non-vector) CPU kernels, whose bits these are.

#include "mlframework/backends/cpu/InstructionSets.hpp"
#include "mlframework/backends/cpu/OptimizerElements.hpp"
#include "mlframework/backends/cpu/OptimizerKernels.hpp"

namespace mlframework::backends::cpu {

template <>
const OptimizerKernelTable& OptimizerKernelsOf<arch::Portable>() noexcept {
  static constexpr OptimizerKernelTable kTable = optimizer::MakeOptimizerTable<float>();
  return kTable;
}

}  // namespace mlframework::backends::cpu
