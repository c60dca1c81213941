// AVX-512 element kernels for CPUs with AVX512_FP16 (and AVX512_BF16): the
// avx512_bf16 table, plus in-place FP16 scaling with VMULPH when the factor is
// itself an FP16 number (then the product rounds once either way, so the bits
// match core/FloatBits.hpp). Compiled with -mavx512fp16 -mavx512bf16 on top of
// the AVX-512 flags; KernelDispatch.cpp selects it only when the CPU has both.

#include "mlframework/backends/cpu/Avx512Ops.hpp"
#include "mlframework/backends/cpu/InstructionSets.hpp"
#include "mlframework/backends/cpu/KernelTable.hpp"

namespace mlframework::backends::cpu {

template <>
const KernelTable& KernelsOf<arch::Avx512Fp16>() noexcept {
  static constexpr KernelTable kTable = simd::MakeTable<arch::Avx512Fp16, Avx512Ops, KernelTable>();
  return kTable;
}

}  // namespace mlframework::backends::cpu
