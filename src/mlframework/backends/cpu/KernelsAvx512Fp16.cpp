// AVX-512 element kernels for CPUs with AVX512_FP16 (and AVX512_BF16): the
// avx512_bf16 table, plus in-place FP16 scaling with VMULPH when the factor is
// itself an FP16 number (then the product rounds once either way, so the bits
// match core/FloatBits.hpp). Compiled with -mavx512fp16 -mavx512bf16 on top of
// the AVX-512 flags; KernelDispatch.cpp selects it only when the CPU has both.

#include "mlframework/backends/cpu/Avx512Isa.hpp"
#include "mlframework/backends/cpu/KernelTable.hpp"

namespace mlframework::backends::cpu {

const KernelTable& Avx512Fp16Kernels() noexcept {
  static constexpr KernelTable kTable =
      simd::MakeTable<Avx512Isa<true, true, false>, Avx512Isa<true, true, true>, KernelTable>("avx512_fp16");
  return kTable;
}

}  // namespace mlframework::backends::cpu
