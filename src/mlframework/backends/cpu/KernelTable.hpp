#pragma once
// Private: the per-instruction-set element kernels of the CPU backend.
//
// Each instruction set lives in its own source file compiled with its own
// flags (KernelsPortable.cpp, KernelsAvx2.cpp, KernelsAvx512.cpp,
// KernelsAvx512Bf16.cpp, KernelsAvx512Fp16.cpp, the way
// xsimd-based libraries split them) and fills one KernelTable. KernelDispatch.cpp
// picks a table once per process; the drivers in MultiTensorKernels.cpp pick one of
// its sets per call (by the bytes the call covers) and call one function pointer
// per piece (a run of one segment inside one chunk), so there is no dtype branch or
// indirect call inside an element loop.
//
// Every table writes exactly the bits the scalar functions of
// core/FloatBits.hpp write (the CUDA backend uses those too); only the
// rounding of the FP32 sum-of-squares partial may differ between tables (and between a
// table's sets: calls from memory accumulate it in FP64).

#include <cstddef>
#include <string_view>

#include <mlframework/core/DataType.hpp>

#include "mlframework/backends/cpu/InstructionSets.hpp"

namespace mlframework::backends::cpu {

/// Indexes a per-dtype slot of a KernelTable.
constexpr std::size_t Slot(DataType dtype) noexcept { return static_cast<std::size_t>(dtype); }

/// The element kernels of one instruction set for one kind of call (see KernelTable).
struct KernelSet {
  /// In place `x = round(x * factor)`; true when any written value is Inf or NaN.
  using UnscaleFn = bool (*)(void* data, std::size_t count, float factor);
  /// True when any element is Inf or NaN (read only).
  using NonFiniteFn = bool (*)(const void* data, std::size_t count);
  /// The sum of `x * x` rounded to FP32, the piece's partial (not finite when an element is not
  /// finite, or when the sum overflows FP32).
  using SumSquaresFn = float (*)(const void* data, std::size_t count);
  /// In place `x = round(x * factor)`.
  using ScaleFn = void (*)(void* data, std::size_t count, float factor);
  /// `dst = round_to_dst(src * factor)`; true when any written value is Inf or NaN.
  using CastFn = bool (*)(const void* src, void* dst, std::size_t count, float factor);

  /// The same with the amax: folds the largest finite |x * factor| (the FP32 product, before
  /// rounding into the destination) of the piece into `*amax` (max with what it holds).
  using UnscaleAmaxFn = bool (*)(void* data, std::size_t count, float factor, float* amax);
  /// NonFiniteFn reading every element, and folding the largest finite |x| into `*amax`.
  using NonFiniteAmaxFn = bool (*)(const void* data, std::size_t count, float* amax);
  /// CastFn folding the largest finite |src * factor| into `*amax`.
  using CastAmaxFn = bool (*)(const void* src, void* dst, std::size_t count, float factor, float* amax);

  UnscaleFn unscale[kDataTypeCount];
  NonFiniteFn non_finite[kDataTypeCount];
  SumSquaresFn sum_squares[kDataTypeCount];
  ScaleFn scale[kDataTypeCount];
  CastFn cast[kDataTypeCount][kDataTypeCount];  ///< [source dtype][destination dtype]
  // The amax forms: separate functions, so the kernels above stay the code they are without it.
  UnscaleAmaxFn unscale_amax[kDataTypeCount];
  NonFiniteAmaxFn non_finite_amax[kDataTypeCount];
  CastAmaxFn cast_amax[kDataTypeCount][kDataTypeCount];  ///< [source dtype][destination dtype]
};

/// One instruction set's kernels, in two sets that compute the same bits.
struct KernelTable {
  /// "portable", "avx2", "avx512", "avx512_bf16" or "avx512_fp16": what InstructionSet() reports.
  std::string_view name;
  /// For calls whose memory fits in the caches: no software prefetch, ordinary stores.
  KernelSet cached;
  /// For calls over more memory than the caches hold: software prefetch a page ahead of the loads,
  /// the FP32 sum of squares accumulates in FP64, and casts write the whole lines of their
  /// destination with non-temporal stores. Those are not fenced: the caller issues a full fence
  /// before the output is read (once per chunk).
  KernelSet from_memory;
  /// from_memory without the software prefetch, for CPUs whose hardware prefetcher needs no help
  /// (SoftwarePrefetch() false): the cached loops, with the casts' non-temporal stores and the
  /// FP64 sum of squares.
  KernelSet from_memory_no_prefetch;
  /// True when from_memory prefetches in software (every SIMD table; portable code has none).
  bool software_prefetch;
};

/// The kernels of the instruction set tagged @p Arch (InstructionSets.hpp), defined in the source
/// file compiled for it (KernelsPortable.cpp, KernelsAvx2.cpp, KernelsAvx512*.cpp; the x86 ones
/// only in x86 builds). Call only when the CPU has that instruction set.
template <class Arch>
const KernelTable& KernelsOf() noexcept;
template <>
const KernelTable& KernelsOf<arch::Portable>() noexcept;
template <>
const KernelTable& KernelsOf<arch::Avx2>() noexcept;
template <>
const KernelTable& KernelsOf<arch::Avx512>() noexcept;
template <>
const KernelTable& KernelsOf<arch::Avx512Bf16>() noexcept;
template <>
const KernelTable& KernelsOf<arch::Avx512Fp16>() noexcept;

/// The table this process dispatches to: the best the CPU supports, or the one named by the
/// environment variable MLFW_CPU_ISA (portable, avx2, avx512, avx512_bf16, avx512_fp16) when the CPU supports it.
/// Chosen once, and completed once: the slots the table leaves empty (the SIMD tables' FP8 slots)
/// hold the portable kernels.
const KernelTable& ActiveKernels() noexcept;

/// The set calls over at least kFromMemoryBytes run in this process: ActiveKernels().from_memory
/// where SoftwarePrefetch() (CpuTensor.hpp) is true, else from_memory_no_prefetch.
const KernelSet& FromMemoryKernels() noexcept;

}  // namespace mlframework::backends::cpu
