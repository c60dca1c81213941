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
// MKL's roots (about 0.6%) rounds the other way. A step with a moment stored below FP32 or with
// stochastically rounded BF16 masters has no torch counterpart: every table takes the IEEE root
// there (TakesTorchRoot()), the CUDA kernels' arithmetic, so such a step's bits are the same on
// every vector table and on the GPU.

#include <cstddef>
#include <cstdint>
#include <span>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/OptimizerStep.hpp>

#include "mlframework/backends/cpu/InstructionSets.hpp"

namespace mlframework::backends::cpu {

/// Rounds @p count FP32 values into @p dst of the low-precision dtype (a cast kernel of KernelTable).
using NarrowFn = bool (*)(const void* src, void* dst, std::size_t count, float factor);

/// How a step stores its masters and states (OptimizerStepLists' formats), shared by its pieces,
/// with the cast kernel that rounds the FP32 states of a Float16 block to FP16 (the element
/// kernels encode the BF16 and block codes themselves).
struct StoredFormats {
  StateFormat first = StateFormat::Float32;
  StateFormat second = StateFormat::Float32;
  std::size_t block_size = kDefaultStateBlockSize;
  MasterFormat masters = MasterFormat::Float32;
  std::uint64_t seed = 0;  // Philox key of stochastic rounding
  std::uint64_t step = 0;  // the step in its counter
  NarrowFn to_float16 = nullptr;
  bool native_bf16 = false;  // the instruction set in use has AVX512_BF16 (avx512_bf16, avx512_fp16)
};

/// One piece: elements [begin, begin + count) of one tensor of a step, with its narrowing kernel.
/// A master or state stored in FP32 is addressed by its float pointer (parameter, first, second);
/// one stored otherwise by its raw pointer (the *_data fields, the float pointer then null), with
/// the block scales and remainders beside it. Every pointer is offset to the piece's first element
/// (the scales to its first block: pieces start at multiples of every block size).
struct OptimizerPiece {
  float* parameter;
  const float* gradient;
  float* first;
  float* second;
  void* low_precision;  // already offset to the piece's first element
  NarrowFn narrow;      // null when low_precision is null
  std::size_t count;
  const StoredFormats* formats = nullptr;  // null: everything FP32
  void* parameter_data = nullptr;          // BF16 masters
  void* first_data = nullptr;              // FirstState not in FP32
  void* second_data = nullptr;             // SecondState not in FP32
  float* first_scales = nullptr;           // block-scaled FirstState
  float* second_scales = nullptr;          // block-scaled SecondState
  std::uint16_t* remainders = nullptr;     // BFloat16Remainder masters
  std::uint32_t tensor = 0;                // index of the tensor in the lists (Philox counter)
  std::uint64_t offset = 0;                // Philox index of the piece's first element (ElementOffsets + begin)
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

/// The largest block of a block-scaled state (StateBlockSize: a power of two from 32 to 2048).
inline constexpr std::size_t kLargestStateBlock = 2048;

/// Elements decoded, updated and encoded together when a master or state is not FP32, or the
/// state's block size when that is larger (a tile holds whole blocks): a power of two that divides
/// kOptimizerChunkElements. Small, so that the FP32 copies stay in L1 between decoding and encoding
/// and the memory streams of the parameters and gradients pause only briefly while a tile is
/// decoded and encoded: the 8-bit AdamW step over 64M elements took 0.48-0.63 ns per element with
/// tiles of 512 against 0.67-0.86 with 2048, 0.54-0.59 with 256 and 0.56-0.80 with 1024 (EPYC,
/// two threads, seven alternated runs each).
inline constexpr std::size_t kStagedTileElements = 512;

}  // namespace mlframework::backends::cpu
