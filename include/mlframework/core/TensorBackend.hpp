#pragma once
/// @file TensorBackend.hpp
/// @brief The fused multi-tensor kernels a backend provides (the Apex multi_tensor_apply seam).

#include <span>
#include <string_view>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// Result of one read pass over a gradient list: non-finite flag and sum of squares.
struct NonFiniteAndNorm {
  bool FoundNonFinite = false;  ///< Any element was Inf or NaN.
  double SumOfSquares = 0.0;    ///< Sum of squares of the (scaled) elements.
};

/// Fused kernels over a whole list of tensors at once.
///
/// A backend receives every tensor of a step in one call, cuts the list into
/// chunks of equal work across all tensors and runs each job in as few passes
/// over memory as it can. Every tensor handed to a backend returns that same
/// backend from ITensor::Backend(); the free functions in MultiTensor.hpp do
/// that grouping and validate arguments, so implementations may assume it.
class MLFRAMEWORK_EXPORT TensorBackend {
 public:
  virtual ~TensorBackend();

  /// Short name ("cpu", "cuda").
  virtual std::string_view Name() const noexcept = 0;

  /// Multiplies every element by @p factor in place; returns true when any result is Inf or NaN.
  virtual bool UnscaleAndCheck(std::span<ITensor* const> tensors, float factor) const = 0;
  /// Returns true when any element is Inf or NaN (read only).
  virtual bool HasNonFinite(std::span<const ITensor* const> tensors) const = 0;
  /// One read pass: non-finite flag and the sum of squares of `factor * x`.
  virtual NonFiniteAndNorm CheckAndSumSquares(std::span<const ITensor* const> tensors, float factor) const = 0;
  /// Multiplies every element by @p factor in place.
  virtual void Scale(std::span<ITensor* const> tensors, float factor) const = 0;
  /// `dst[i] = round_to_dst_dtype(src[i] * factor)`; dtypes may differ, sizes match.
  /// Returns true when any written value is Inf or NaN (the check is free in the same pass).
  virtual bool CastInto(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float factor) const = 0;

 protected:
  /// Only implementations construct the interface.
  TensorBackend() = default;
  /// Implementations may be copyable.
  TensorBackend(const TensorBackend&) = default;
  /// Implementations may be copy-assignable.
  TensorBackend& operator=(const TensorBackend&) = default;
};

}  // namespace mlframework
