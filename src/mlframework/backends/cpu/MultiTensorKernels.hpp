#pragma once
// Private: the CPU backend's fused multi-tensor kernels.
//
// A list of tensors is seen as one long virtual array cut into chunks of
// kChunkElements; OpenMP threads take chunks, and a chunk may span several
// small tensors, so 10,000 tiny tensors cost about what one flat tensor of
// the same size costs. The element loops dispatch on dtype once per piece.

#include <cstddef>
#include <memory>
#include <optional>
#include <span>

#include <mlframework/core/TensorBackend.hpp>

namespace mlframework::backends::cpu {

/// Elements per chunk: large enough to amortise scheduling, small enough to balance 10k tensors.
inline constexpr std::size_t kChunkElements = 32768;
/// Calls over at least this many bytes (a list's, or a cast's source and destination together)
/// run FromMemoryKernels() (KernelTable.hpp): casts write with non-temporal stores, and the loops
/// prefetch in software where SoftwarePrefetch() is true. Smaller ones run KernelTable::cached.
inline constexpr std::size_t kFromMemoryBytes = std::size_t{16} << 20;

/// The chunk plan of a list, made once per call or kept across calls (MultiTensorKernels.cpp).
struct Plan;

/// The front end's fast path (core/MultiTensor.cpp). The plan of @p tensors when every one is a
/// CPU tensor, or null (an empty list, a null entry, another backend's tensor: the front end's
/// general path reports or groups those). A list holding the same live tensors in the same order
/// as a list planned twice before, while no tensor of a kept plan has been destroyed since, takes
/// the kept plan without reading the tensor objects.
std::shared_ptr<const Plan> PlanOfList(std::span<const TensorPtr> tensors);
/// The fast path of CastInto: its result over the cast planned for exactly these source and
/// destination tensors, kept as PlanOfList keeps a list; nullopt when none is kept. Kept lists
/// passed every check of CastInto, and tensors do not change.
std::optional<bool> CastIntoKnownLists(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor);
/// CastInto over lists of CPU tensors (planned in one walk, and kept as PlanOfList keeps a
/// list), or nullopt when they are not all CPU tensors. @p src and @p dst must have the same
/// sizes pairwise: the caller checks them first.
std::optional<bool> CastIntoCpuLists(std::span<const TensorPtr> src, std::span<const TensorPtr> dst, float factor);

/// Called by a CpuTensor that a kept plan held when it is destroyed: no kept plan is used again.
void KeptTensorDestroyed() noexcept;

bool UnscaleAndCheckKernel(const Plan& plan, float factor);
bool HasNonFiniteKernel(const Plan& plan);
NonFiniteAndNorm CheckAndSumSquaresKernel(const Plan& plan, float factor);
void ScaleKernel(const Plan& plan, float factor);

bool UnscaleAndCheckKernel(std::span<ITensor* const> tensors, float factor);
bool HasNonFiniteKernel(std::span<const ITensor* const> tensors);
NonFiniteAndNorm CheckAndSumSquaresKernel(std::span<const ITensor* const> tensors, float factor);
void ScaleKernel(std::span<ITensor* const> tensors, float factor);
bool CastIntoKernel(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float factor);

/// Widens @p count elements of @p dtype at @p src into floats (single thread).
MLFRAMEWORK_EXPORT void WidenToFloat(const void* src, DataType dtype, float* dst, std::size_t count);
/// Rounds @p count floats into @p dtype elements at @p dst (single thread).
MLFRAMEWORK_EXPORT void NarrowFromFloat(const float* src, void* dst, DataType dtype, std::size_t count);

}  // namespace mlframework::backends::cpu
