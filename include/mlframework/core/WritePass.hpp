#pragma once
/// @file WritePass.hpp
/// @brief What one write pass over a tensor list does (TensorBackend::Write).

#include <mlframework/core/Error.hpp>

namespace mlframework {

/// The element-wise operation of a write pass.
enum class WriteOp : unsigned char {
  /// In place: `x = round(x * Factor)` for every tensor of the list (the destination list is empty).
  Scale,
  /// `dst[i] = round_to_dst_dtype(src[i] * Factor)`: dtypes may differ, element counts match.
  Cast,
  /// `dst[i] = round_to_dst_dtype(dst[i] + round_to_fp32(Factor * src[i]))`: widened to FP32,
  /// the product rounded before the sum (no fused multiply-add).
  Add,
};

/// What a write pass computes besides its writes.
struct WritePassOptions {
  /// The operation.
  WriteOp Op = WriteOp::Scale;
  /// The factor of Scale and Cast, the `alpha` of Add.
  float Factor = 1.0f;
  /// Also whether any written value is Inf or NaN (free in the same pass; a device backend waits
  /// for the answer). Without it a device backend queues the work and returns at once.
  bool Check = false;
  /// Also the largest finite `|x * Factor|` of the values written, taken from the FP32 products
  /// before rounding into the destination's dtype (Inf and NaN left out). Implies Check.
  bool Amax = false;
};

/// The answer of a write pass.
struct WritePassResult {
  bool FoundNonFinite = false;  ///< A written value is Inf or NaN (false unless Check or Amax).
  float Amax = 0.0f;            ///< Largest finite |x * Factor| (0 unless Amax, or when none is finite).
};

/// ArgumentError naming `options` when an Add asks for the check or the amax (no kernel fuses
/// them into the add), or when Op is not a WriteOp.
inline void ValidateWritePassOptions(const WritePassOptions& options) {
  if (options.Op != WriteOp::Scale && options.Op != WriteOp::Cast && options.Op != WriteOp::Add) {
    throw ArgumentError("options", "Op " + std::to_string(static_cast<int>(options.Op)) + " is not a WriteOp");
  }
  if (options.Op == WriteOp::Add && (options.Check || options.Amax)) {
    throw ArgumentError("options", "asks an Add pass for the non-finite check or the amax; no kernel fuses them");
  }
}

}  // namespace mlframework
