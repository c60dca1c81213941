#pragma once
/// @file CpuTensor.hpp
/// @brief CPU backend: factories and queries (the tensor class itself is private).
///
/// CPU tensors keep their elements in xtensor containers (FP16 and BF16 as
/// 16-bit words, FP8 as bytes) and run the fused multi-tensor kernels with OpenMP threads
/// over equal chunks cut across all tensors, vectorized with run-time
/// instruction-set dispatch.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <mlframework/core/BFloat16.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float16.hpp>
#include <mlframework/core/Float8.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/export.hpp>

namespace mlframework::backends::cpu {

/// A CPU tensor of @p shape and @p dtype filled with zeros.
MLFRAMEWORK_EXPORT TensorPtr Empty(Shape shape, DataType dtype);
/// A CPU tensor of @p shape whose elements are @p base's elements starting at element @p offset.
/// The view shares @p base's memory and keeps it alive; writes through either are seen by both.
/// Throws ArgumentNullError for a null @p base, ArgumentError when @p base is not a CPU tensor or
/// the view does not fit inside it.
MLFRAMEWORK_EXPORT TensorPtr View(const TensorPtr& base, std::size_t offset, const Shape& shape);
/// A CPU tensor over host memory that the caller owns, with no copy: the fused kernels run on
/// @p data directly, as on the library's own tensors. @p owner is held until the last reference
/// to the tensor (and to any view of it) is gone, so it can keep the memory alive (the framework's
/// tensor, a DLPack capsule); it may be null when the caller guarantees the lifetime.
/// The memory must be contiguous, row-major, `Size() * ElementSize(dtype)` bytes, and @p data
/// aligned to the element size (any further alignment is fine).
/// ArgumentError naming the parameter and its value: @p data null while @p shape has elements,
/// @p data not aligned to the element size, a @p dtype that is not a DataType, or a @p shape
/// whose byte size overflows.
MLFRAMEWORK_EXPORT TensorPtr Wrap(void* data, Shape shape, DataType dtype, std::shared_ptr<void> owner);
/// True when @p tensor is a CPU-backend tensor (so its memory can be read directly).
MLFRAMEWORK_EXPORT bool IsCpuTensor(const ITensor& tensor) noexcept;
/// Raw element storage of a CPU tensor (`Size() * ElementSize` bytes); ArgumentError otherwise.
MLFRAMEWORK_EXPORT void* MutableData(ITensor& tensor);
/// Raw element storage of a CPU tensor, read only; ArgumentError otherwise.
MLFRAMEWORK_EXPORT const void* Data(const ITensor& tensor);
/// The CPU backend's fused kernels.
MLFRAMEWORK_EXPORT const TensorBackend& Backend() noexcept;
/// Name of the instruction set the kernels dispatched to on this CPU: "avx512_fp16", "avx512_bf16",
/// "avx512", "avx2" or "portable". Chosen once per process, the best the CPU supports; the environment variable
/// MLFW_CPU_ISA (same names) selects a path for tests and benchmarks when the CPU supports it.
/// Every path writes the same bits (core/FloatBits.hpp rounding); only the rounding of sums of
/// squares differs between paths.
MLFRAMEWORK_EXPORT std::string_view InstructionSet() noexcept;
/// True when the kernels prefetch a page ahead in software in calls over 16 MiB and more. Chosen
/// once per process: on for the SIMD paths except on AMD CPUs, where the same loops ran up to
/// 1.39x slower with it (docs/BENCHMARKS.md, "Why the kernels are built as they are"); never on
/// the portable path. The environment variable MLFW_CPU_PREFETCH=1 or 0 forces it on or off. It
/// changes speed only, never a result.
MLFRAMEWORK_EXPORT bool SoftwarePrefetch() noexcept;

/// True when CPU tensors of up to 32 KiB take their elements from the library's pool of small
/// buffers, which hands memory out in the order it is asked for: small tensors made one after
/// another then lie back to back, and fused kernels over them stream like one buffer (a plain
/// read of thousands of such 16-bit tensors took 1.00-1.04x the time of one flat buffer, and
/// 1.37-1.53x where malloc placed them; docs/BENCHMARKS.md, "Why the kernels are built as they
/// are"). Memory of freed small tensors is kept for later tensors of the same rounded size, and up
/// to 32 MiB of emptied 2 MiB blocks are kept for reuse. On unless the environment variable
/// MLFW_CPU_SMALL_POOL=0 (read once per process) turns it off; larger tensors always come from the
/// aligned operator new. It changes where memory lies, never a result.
MLFRAMEWORK_EXPORT bool SmallTensorPool() noexcept;

/// True when CPU tensors of 2 MiB and more start on a 2 MiB boundary and ask the operating
/// system for 2 MiB pages (Linux transparent huge pages, madvise(MADV_HUGEPAGE)), as do the
/// small-tensor pool's 2 MiB blocks. No memory is added: a tensor's end past its last whole 2 MiB
/// page keeps small pages; where the system has no transparent huge pages the request does
/// nothing. Off unless the environment variable MLFW_CPU_HUGE_PAGES=1 (read once per process)
/// turns it on, as PyTorch's THP_MEM_ALLOC_ENABLE does: with 4 KiB pages the same read loop over
/// two identical 64 MiB buffers differed by up to 1.26x and with 2 MiB pages by at most 1.02x, but
/// the fused kernels' speed against the limit loops did not change measurably
/// (docs/BENCHMARKS.md, "Why the kernels are built as they are"). It changes where memory lies,
/// never a result.
MLFRAMEWORK_EXPORT bool HugePages() noexcept;

/// The C++ element type stored for a DataType.
template <DataType D>
struct StorageOf;
/// FP32 elements are floats.
template <>
struct StorageOf<DataType::Float32> {
  using type = float;  ///< Element type.
};
/// FP16 elements are binary16 bit structs.
template <>
struct StorageOf<DataType::Float16> {
  using type = Float16;  ///< Element type.
};
/// BF16 elements are bfloat16 bit structs.
template <>
struct StorageOf<DataType::BFloat16> {
  using type = BFloat16;  ///< Element type.
};

/// FP8 E4M3FN elements are 8-bit structs.
template <>
struct StorageOf<DataType::Float8E4M3FN> {
  using type = Float8E4M3FN;  ///< Element type.
};

/// FP8 E5M2 elements are 8-bit structs.
template <>
struct StorageOf<DataType::Float8E5M2> {
  using type = Float8E5M2;  ///< Element type.
};

/// Typed view of a CPU tensor's elements; ArgumentError when the dtype is not @p D.
template <DataType D>
std::span<typename StorageOf<D>::type> Elements(ITensor& tensor) {
  void* data = MutableData(tensor);
  if (tensor.GetDataType() != D) {
    throw ArgumentError("tensor", std::string("has dtype ") + std::string(ToString(tensor.GetDataType())) +
                                      ", expected " + std::string(ToString(D)));
  }
  return {static_cast<typename StorageOf<D>::type*>(data), tensor.Size()};
}

}  // namespace mlframework::backends::cpu
