// AVX-512 element kernels that also round FP32 to BF16 with the AVX512_BF16
// instruction VCVTNEPS2BF16 (vectors holding a subnormal take the integer
// path, so the bits match core/FloatBits.hpp). Compiled with -mavx512bf16 on
// top of the AVX-512 flags; KernelDispatch.cpp selects it only when the CPU has it.

#include "mlframework/backends/cpu/Avx512Ops.hpp"
#include "mlframework/backends/cpu/InstructionSets.hpp"
#include "mlframework/backends/cpu/KernelTable.hpp"

namespace mlframework::backends::cpu {

template <>
const KernelTable& KernelsOf<arch::Avx512Bf16>() noexcept {
  static constexpr KernelTable kTable = simd::MakeTable<arch::Avx512Bf16, Avx512Ops, KernelTable>();
  return kTable;
}

}  // namespace mlframework::backends::cpu
