#pragma once
/// @file Format.hpp
/// @brief FP8 recipe formats and tensor roles (Transformer Engine's `recipe.Format`).

#include <string_view>

#include <mlframework/core/DataType.hpp>
#include <mlframework/export.hpp>

namespace mlframework::fp8 {

/// Which FP8 formats a recipe uses (Transformer Engine's `Format`; its pure-E5M2 format is left
/// out, as Transformer Engine's DelayedScaling rejects it).
enum class Format : unsigned char {
  E4M3,    ///< E4M3 (Float8E4M3FN) for every tensor.
  HYBRID,  ///< E4M3 for the forward pass (weights, activations), E5M2 (Float8E5M2) for gradients.
};

/// What a registered tensor is, which picks its FP8 format under Format::HYBRID.
enum class TensorRole : unsigned char {
  Forward,   ///< A weight or an activation of the forward pass.
  Gradient,  ///< A gradient of the backward pass.
};

/// "E4M3", "HYBRID"; "Unknown" outside the enum.
MLFRAMEWORK_EXPORT std::string_view ToString(Format format) noexcept;
/// "Forward", "Gradient"; "Unknown" outside the enum.
MLFRAMEWORK_EXPORT std::string_view ToString(TensorRole role) noexcept;

/// The FP8 element type of a tensor of @p role under @p format: Float8E5M2 for a gradient under
/// HYBRID, Float8E4M3FN otherwise.
MLFRAMEWORK_EXPORT DataType Float8TypeOf(Format format, TensorRole role);

/// The largest finite value of @p dtype: 448 for Float8E4M3FN, 57344 for Float8E5M2; ArgumentError
/// naming `dtype` for any other type.
MLFRAMEWORK_EXPORT float Float8Max(DataType dtype);

}  // namespace mlframework::fp8
