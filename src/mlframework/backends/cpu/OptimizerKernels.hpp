#pragma once
// Private: the CPU backend's fused optimizer steps (Adam/AdamW, SGD). One pass per step reads
// parameter, gradient and state and writes parameter, state and, optionally, the FP16/BF16 copy
// of the updated parameter. OpenMP threads take chunks of the list; each piece of a chunk is one
// call of the element kernel of the instruction set KernelDispatch.cpp chose (OptimizerKernels*.cpp).
//
// Numerics: every operation is the FP32 operation of PyTorch's single-tensor Adam/SGD
// (foreach=False) as ATen's CPU kernels compute it, in its order (OptimizerElements.hpp). The AVX2
// and AVX-512 tables fuse the multiply-adds torch's vectorised kernels fuse (explicit FMAs, in the
// vector bodies and the scalar tails alike); the portable table rounds each product and sum, as
// torch's default capability. The files are compiled with -ffp-contract=off, so no other
// operation is fused; the division is the IEEE one. torch's square root is MKL's (not correctly
// rounded): the AVX-512 table reproduces it (VRSQRT14PS and a fused Newton step, Root() in
// OptimizerElements.hpp), so its results are torch's bits. The AVX2 and portable tables take the
// correctly rounded SQRTPS (xsimd::sqrt, or std::sqrt under -fno-math-errno): their results are
// torch's bits for SGD and Adam's moments, and Adam's weights can differ by a few ulp where one of
// MKL's roots (about 0.6%) rounds the other way.

#include <cstddef>
#include <span>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/OptimizerStep.hpp>

#include "mlframework/backends/cpu/InstructionSets.hpp"

namespace mlframework::backends::cpu {

/// Rounds @p count FP32 values into @p dst of the low-precision dtype (a cast kernel of KernelTable).
using NarrowFn = bool (*)(const void* src, void* dst, std::size_t count, float factor);

/// One piece: elements [begin, begin + count) of one tensor of a step, with its narrowing kernel.
struct OptimizerPiece {
  float* parameter;
  const float* gradient;
  float* first;
  float* second;
  void* low_precision;  // already offset to the piece's first element
  NarrowFn narrow;      // null when low_precision is null
  std::size_t count;
};

/// The element kernels of one instruction set.
struct OptimizerKernelTable {
  void (*adam)(const OptimizerPiece& piece, const AdamStepScalars& scalars);
  void (*sgd)(const OptimizerPiece& piece, const SGDStepScalars& scalars);
};

/// The table of the tag @p Arch, defined in the file compiled for it (OptimizerKernelsPortable.cpp,
/// OptimizerKernelsAvx2.cpp, OptimizerKernelsAvx512.cpp; the x86 ones only in x86 builds).
template <class Arch>
const OptimizerKernelTable& OptimizerKernelsOf() noexcept;
template <>
const OptimizerKernelTable& OptimizerKernelsOf<arch::Portable>() noexcept;
template <>
const OptimizerKernelTable& OptimizerKernelsOf<arch::Avx2>() noexcept;
template <>
const OptimizerKernelTable& OptimizerKernelsOf<arch::Avx512>() noexcept;

/// The table of the instruction set ActiveKernels() runs (the AVX-512 one for every AVX-512 tag).
const OptimizerKernelTable& ActiveOptimizerKernels() noexcept;

/// Elements of one piece of a fused step: a chunk an OpenMP thread takes, small enough that a
/// list of a few large tensors still spreads over every thread.
inline constexpr std::size_t kOptimizerChunkElements = std::size_t{1} << 15;

}  // namespace mlframework::backends::cpu
