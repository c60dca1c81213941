#pragma once
/// @file HostConversion.hpp
/// @brief Dtype conversion of raw host buffers, for code that moves elements outside tensors.

#include <cstddef>

#include <mlframework/core/DataType.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// Writes to @p dst the @p count elements of @p src (of @p src_dtype) rounded into @p dst_dtype
/// (round to nearest even: the bits every backend's casts write, core/FloatBits.hpp). Both
/// buffers are host memory of at least @p count elements of their dtype and must not overlap.
///
/// Why: a collective that moves 16-bit words (MPI has no FP16 or BF16 type) widens them to FP32,
/// combines, and narrows the result, block by block, on buffers that are no tensors. The CPU
/// backend implements this with the vectorised casts it picked for this CPU at load time (F16C,
/// AVX-512) and ordinary stores, so a buffer it wrote can go to another thread or to MPI
/// without a fence.
///
/// Throws ArgumentError naming `src_dtype` or `dst_dtype` for a value outside DataType,
/// ArgumentNullError naming `src` or `dst` for a null buffer when @p count is not zero.
MLFRAMEWORK_EXPORT void ConvertHostElements(const void* src, DataType src_dtype, void* dst, DataType dst_dtype,
                                            std::size_t count);

}  // namespace mlframework
