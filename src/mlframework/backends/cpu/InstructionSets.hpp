#pragma once
// Private: the instruction sets the CPU kernels are built for, one tag type each (in the manner
// of xsimd's arch types), carrying the traits the kernels and the dispatcher (KernelDispatch.cpp)
// read. Tags are plain constants: no code, so every source file may include them whatever its
// instruction-set flags.

#include <string_view>

namespace mlframework::backends::cpu::arch {

/// Scalar code on core/FloatBits.hpp; runs on every CPU.
struct Portable {
  /// What InstructionSet() reports, and the value of MLFW_CPU_ISA that selects it.
  static constexpr std::string_view kName = "portable";
};

/// AVX2 + FMA + F16C (xsimd fma3<avx2> for FP32 math).
struct Avx2 {
  static constexpr std::string_view kName = "avx2";
};

/// AVX-512 F, BW, DQ and VL (xsimd avx512bw for FP32 math).
struct Avx512 {
  static constexpr std::string_view kName = "avx512";
  /// Rounds FP32 to BF16 with VCVTNEPS2BF16 (AVX512_BF16) where that is exact.
  static constexpr bool kNativeBf16 = false;
  /// Multiplies FP16 words in place with VMULPH (AVX512_FP16) where that is exact.
  static constexpr bool kNativeFp16 = false;
};

/// Avx512 plus AVX512_BF16.
struct Avx512Bf16 : Avx512 {
  static constexpr std::string_view kName = "avx512_bf16";
  static constexpr bool kNativeBf16 = true;
};

/// Avx512Bf16 plus AVX512_FP16.
struct Avx512Fp16 : Avx512Bf16 {
  static constexpr std::string_view kName = "avx512_fp16";
  static constexpr bool kNativeFp16 = true;
};

/// A list of tags.
template <class... Archs>
struct List {};

/// Every instruction set, best first: the dispatcher takes the first the CPU supports.
using All = List<Avx512Fp16, Avx512Bf16, Avx512, Avx2, Portable>;

}  // namespace mlframework::backends::cpu::arch
