// The FP8 element loops (Float8Elements.hpp) on 8 lanes, compiled with the AVX2 flags of
// KernelsAvx2.cpp only for this file; ActiveFloat8Kernels() selects them only when the CPU has AVX2.

#include "mlframework/backends/cpu/Float8Elements.hpp"
#include "mlframework/backends/cpu/Float8Kernels.hpp"

namespace mlframework::backends::cpu {

template <>
const Float8KernelSet& Float8KernelsOf<arch::Avx2>() noexcept {
  static const Float8KernelSet kSet = float8::SetOf<float8::Elements<8>>();
  return kSet;
}

}  // namespace mlframework::backends::cpu
