#pragma once
// Private: the CPU backend's FP8 kernels (core/Float8Cast.hpp): per-tensor amax, the scaled
// saturating cast into FP8 with the input's amax, and dequantization.
//
// The element loops live in Float8Elements.hpp, compiled once per instruction set
// (Float8KernelsPortable.cpp, Float8KernelsAvx2.cpp, Float8KernelsAvx512.cpp) into one
// Float8KernelSet each; the driver (Float8Kernels.cpp) picks the set of the instruction set
// KernelDispatch.cpp chose for the other kernels (so MLFW_CPU_ISA forces these too), cuts the
// lists into chunks and runs them on OpenMP threads.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/ITensor.hpp>

#include "mlframework/backends/cpu/InstructionSets.hpp"

namespace mlframework::backends::cpu {

/// The FP8 element kernels of one instruction set. Each writes exactly the bits of the scalar
/// functions of core/Float8Bits.hpp (the portable set calls them).
struct Float8KernelSet {
  /// The largest magnitude bits (sign bit cleared) of @p count elements of one dtype, in that
  /// dtype's own encoding: every format orders its magnitudes like unsigned integers, NaNs above
  /// infinity, so the integer maximum is the amax and a NaN wins over every number.
  using AmaxBitsFn = std::uint32_t (*)(const void* src, std::size_t count);
  /// `dst = saturate_to_fp8(src * scale)` over @p count floats; returns the largest FP32
  /// magnitude bits of the INPUT (the amax of @p src, NaN winning).
  using CastFn = std::uint32_t (*)(const float* src, std::uint8_t* dst, std::size_t count, float scale);
  /// `dst = float(src) * scale_inv` (FP32 product) over @p count FP8 bytes.
  using DequantizeFn = void (*)(const std::uint8_t* src, float* dst, std::size_t count, float scale_inv);
  /// `dst = e4m3fn(src * scale)` over @p count floats whose products are finite and at most 448
  /// in magnitude (the FP8 block wire scales each block so): the bits of cast_e4m3fn, without
  /// its saturation, its NaN select and the input's amax, which such products never need.
  using InRangeCastFn = void (*)(const float* src, std::uint8_t* dst, std::size_t count, float scale);
  /// Parts of FP8 codes with one scale each, summed by DecodeSumFn.
  struct Parts {
    const std::uint8_t* codes;  ///< part p's codes start at `codes + p * code_stride`
    std::size_t code_stride;
    const float* scale_inv;  ///< part p's scale is `scale_inv[p * scale_stride]`
    std::size_t scale_stride;
    std::size_t count;  ///< the parts (at least one)
  };
  /// `dst[i] = ((d_0[i] + d_1[i]) + ... + d_(P-1)[i]) * factor` over @p count elements, in FP32 in
  /// that order, with `d_p[i] = float(code) * scale_inv` of part p (dequantize's product): one
  /// pass that writes @p dst once.
  using DecodeSumFn = void (*)(const Parts& parts, float* dst, std::size_t count, float factor);

  AmaxBitsFn amax_bits[kDataTypeCount];
  CastFn cast_e4m3fn;
  CastFn cast_e5m2;
  DequantizeFn dequantize_e4m3fn;
  DequantizeFn dequantize_e5m2;
  InRangeCastFn cast_e4m3fn_in_range;
  DecodeSumFn decode_sum_e4m3fn;
};

/// The set of the instruction set tagged @p Arch (defined in the file compiled for it; the x86
/// ones only in x86 builds). Call only when the CPU has that instruction set.
template <class Arch>
const Float8KernelSet& Float8KernelsOf() noexcept;
template <>
const Float8KernelSet& Float8KernelsOf<arch::Portable>() noexcept;
template <>
const Float8KernelSet& Float8KernelsOf<arch::Avx2>() noexcept;
template <>
const Float8KernelSet& Float8KernelsOf<arch::Avx512>() noexcept;

/// The set this process runs: that of the instruction set ActiveKernels() (KernelTable.hpp)
/// reports (the AVX-512 set for every AVX-512 table), so MLFW_CPU_ISA selects it too.
const Float8KernelSet& ActiveFloat8Kernels() noexcept;

/// The name of the set ActiveFloat8Kernels() returns ("portable", "avx2" or "avx512").
std::string_view ActiveFloat8KernelsName() noexcept;

/// `amax[i] = max |tensors[i]|` over CPU tensors (NaN propagates); @p amax holds tensors.size() floats.
void Float8AmaxKernel(std::span<const ITensor* const> tensors, float* amax);

/// `dst[i] = saturate_to_fp8(src[i] * scale[i])` over CPU tensors (FP32/FP16/BF16 into
/// E4M3FN/E5M2, sizes matching pairwise), and `amax[i] = max |src[i]|` when @p amax is not null.
void ScaledCastToFloat8Kernel(std::span<const ITensor* const> src, std::span<ITensor* const> dst, const float* scale,
                              float* amax);

/// `dst[i] = round_to_dst(float(src[i]) * scale_inv[i])` over CPU tensors (E4M3FN/E5M2 into
/// FP32/FP16/BF16, sizes matching pairwise).
void DequantizeFloat8Kernel(std::span<const ITensor* const> src, std::span<ITensor* const> dst, const float* scale_inv);

}  // namespace mlframework::backends::cpu
