// AVX-512 element kernels that also round FP32 to BF16 with the AVX512_BF16
// instruction VCVTNEPS2BF16 (vectors holding a subnormal take the integer
// path, so the bits match core/FloatBits.hpp). Compiled with -mavx512bf16 on
// top of the AVX-512 flags; KernelDispatch.cpp selects it only when the CPU has it.

#include "mlframework/backends/cpu/Avx512Isa.hpp"
#include "mlframework/backends/cpu/KernelTable.hpp"

namespace mlframework::backends::cpu {

const KernelTable& Avx512Bf16Kernels() noexcept {
  static constexpr KernelTable kTable =
      simd::MakeTable<Avx512Isa<true, false, false>, Avx512Isa<true, false, true>, KernelTable>("avx512_bf16");
  return kTable;
}

}  // namespace mlframework::backends::cpu
