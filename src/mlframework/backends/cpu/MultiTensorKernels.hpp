#pragma once
// Private: the CPU backend's fused multi-tensor kernels, run over a chunk plan (Plan.hpp).
// OpenMP threads take chunks; each piece of a chunk is one call of the element kernel the
// instruction-set table (KernelTable.hpp) holds for its dtype, so there is no dtype branch
// inside an element loop.

#include <cstddef>
#include <span>

#include <mlframework/core/TensorBackend.hpp>

#include "mlframework/backends/cpu/Plan.hpp"

namespace mlframework::backends::cpu {

bool UnscaleAndCheckKernel(const Plan& plan, float factor);
bool HasNonFiniteKernel(const Plan& plan);
NonFiniteAndNorm CheckAndSumSquaresKernel(const Plan& plan, float factor);
void ScaleKernel(const Plan& plan, float factor);
/// The cast along a source plan and a destination plan cut alike (Planning.hpp, PlansOf).
bool CastKernel(const PairPlans& plans, float factor);

/// The same over lists of CPU tensors, planned for this call (Planning.hpp, PlanOf).
bool UnscaleAndCheckKernel(std::span<ITensor* const> tensors, float factor);
bool HasNonFiniteKernel(std::span<const ITensor* const> tensors);
NonFiniteAndNorm CheckAndSumSquaresKernel(std::span<const ITensor* const> tensors, float factor);
void ScaleKernel(std::span<ITensor* const> tensors, float factor);
/// @p src and @p dst have the same sizes pairwise: the caller checks them first.
bool CastIntoKernel(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float factor);

/// The amax forms (TensorBackend.hpp, NonFiniteAndAmax): the same passes with the amax folded in;
/// CheckAndAmaxKernel reads every chunk (no early exit: the amax needs every value).
NonFiniteAndAmax UnscaleCheckAndAmaxKernel(const Plan& plan, float factor);
NonFiniteAndAmax CheckAndAmaxKernel(const Plan& plan);
NonFiniteAndAmax CastAndAmaxKernel(const PairPlans& plans, float factor);
NonFiniteAndAmax UnscaleCheckAndAmaxKernel(std::span<ITensor* const> tensors, float factor);
NonFiniteAndAmax CastIntoAndAmaxKernel(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                       float factor);

/// Widens @p count elements of @p dtype at @p src into floats (single thread).
MLFRAMEWORK_EXPORT void WidenToFloat(const void* src, DataType dtype, float* dst, std::size_t count);
/// Rounds @p count floats into @p dtype elements at @p dst (single thread).
MLFRAMEWORK_EXPORT void NarrowFromFloat(const float* src, void* dst, DataType dtype, std::size_t count);

}  // namespace mlframework::backends::cpu
