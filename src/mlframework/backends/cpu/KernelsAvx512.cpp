// AVX-512 element kernels (F, BW, DQ, VL), compiled with those flags only for
// this file; KernelDispatch.cpp selects them only when the CPU has them.
// The operations live in Avx512Ops.hpp, the tag in InstructionSets.hpp.

#include "mlframework/backends/cpu/Avx512Ops.hpp"
#include "mlframework/backends/cpu/InstructionSets.hpp"
#include "mlframework/backends/cpu/KernelTable.hpp"

namespace mlframework::backends::cpu {

template <>
const KernelTable& KernelsOf<arch::Avx512>() noexcept {
  static constexpr KernelTable kTable = simd::MakeTable<arch::Avx512, Avx512Ops, KernelTable>();
  return kTable;
}

}  // namespace mlframework::backends::cpu
