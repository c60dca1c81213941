#pragma once
/// @file Headroom.hpp
/// @brief How far a loss scale sits from overflow, from the amax of a step (headroom telemetry).

#include <mlframework/core/DataType.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// The largest finite value of @p dtype: 65504 for FP16, about 3.39e38 for BF16, about 3.40e38 for
/// FP32, 448 for Float8E4M3FN, 57344 for Float8E5M2. ArgumentError naming `dtype` for a value
/// outside DataType.
MLFRAMEWORK_EXPORT double MaxFiniteValue(DataType dtype);

/// The headroom of a step in bits: `log2(MaxFiniteValue(gradient_dtype) / (amax * scale))`.
///
/// @p amax is the largest absolute value of the unscaled gradients (GradScaler::LastAmax() and
/// the other front ends' LastAmax()), @p scale the loss scale the gradients were produced with,
/// so `amax * scale` is the largest gradient backward wrote. The result says how many times the
/// scale could double before that gradient overflows @p gradient_dtype (for FP16,
/// `log2(65504 / (amax * scale))`); negative when it already did. Computed in FP64 as a
/// difference of logarithms, so `amax * scale` cannot overflow. +infinity when @p amax is 0 (no
/// non-zero finite gradient).
/// ArgumentError naming the parameter and the value: @p amax negative or not finite, @p scale
/// not finite or not > 0, @p gradient_dtype outside DataType.
MLFRAMEWORK_EXPORT double HeadroomBits(float amax, float scale, DataType gradient_dtype);

}  // namespace mlframework
