#pragma once
// Private: the CPU backend's fused multi-tensor kernels.
//
// A list of tensors is seen as one long virtual array cut into chunks of
// kChunkElements; OpenMP threads take chunks, and a chunk may span several
// small tensors, so 10,000 tiny tensors cost about what one flat tensor of
// the same size costs. The element loops dispatch on dtype once per piece.

#include <cstddef>
#include <span>

#include <mlframework/core/TensorBackend.hpp>

namespace mlframework::backends::cpu {

/// Elements per chunk: large enough to amortise scheduling, small enough to balance 10k tensors.
inline constexpr std::size_t kChunkElements = 32768;
/// Calls over at least this many bytes (a list's, or a cast's source and destination together)
/// run KernelTable::from_memory: software prefetch, and casts write with non-temporal stores.
/// Smaller ones run KernelTable::cached.
inline constexpr std::size_t kFromMemoryBytes = std::size_t{16} << 20;

bool UnscaleAndCheckKernel(std::span<ITensor* const> tensors, float factor);
bool HasNonFiniteKernel(std::span<const ITensor* const> tensors);
NonFiniteAndNorm CheckAndSumSquaresKernel(std::span<const ITensor* const> tensors, float factor);
void ScaleKernel(std::span<ITensor* const> tensors, float factor);
bool CastIntoKernel(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float factor);

/// Widens @p count elements of @p dtype at @p src into floats (single thread).
void WidenToFloat(const void* src, DataType dtype, float* dst, std::size_t count);
/// Rounds @p count floats into @p dtype elements at @p dst (single thread).
void NarrowFromFloat(const float* src, void* dst, DataType dtype, std::size_t count);

}  // namespace mlframework::backends::cpu
