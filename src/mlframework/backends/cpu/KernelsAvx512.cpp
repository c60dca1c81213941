// AVX-512 element kernels (F, BW, DQ, VL), compiled with those flags only for
// this file; KernelDispatch.cpp selects them only when the CPU has them.
// The instruction-set traits live in Avx512Isa.hpp.

#include "mlframework/backends/cpu/Avx512Isa.hpp"
#include "mlframework/backends/cpu/KernelTable.hpp"

namespace mlframework::backends::cpu {

const KernelTable& Avx512Kernels() noexcept {
  static constexpr KernelTable kTable =
      simd::MakeTable<Avx512Isa<false, false, false>, Avx512Isa<false, false, true>, KernelTable>("avx512");
  return kTable;
}

}  // namespace mlframework::backends::cpu
