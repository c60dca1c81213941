#pragma once
/// @file WritePass.hpp
/// @brief What one write pass over a tensor list does (TensorBackend::Write).

#include <mlframework/core/Error.hpp>

namespace mlframework {

class DeviceScaleState;

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

/// Which factor a write pass with a scale state (WritePassOptions::State) takes from it.
enum class StateFactor : unsigned char {
  /// InverseScale(scale): an unscale, whose non-finite check and amax go into the state.
  InverseScale,
  /// The scale itself (a loss being scaled): nothing is recorded.
  Scale,
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
  /// A dynamic-scaling state (core/DeviceScaling.hpp) the pass takes its factor from instead of
  /// Factor, read where the state lives (on a device: never on the host, so the pass does not
  /// wait). With StateFactor::InverseScale the pass ORs "a written value is Inf or NaN" into the
  /// state's found-inf flag and, while the state tracks the amax, folds the amax of what it wrote
  /// into the state's; with StateFactor::Scale it records nothing. Check and Amax stay false (the
  /// answer is in the state, and the result is empty). Null: Factor, Check and Amax apply.
  DeviceScaleState* State = nullptr;
  /// Which factor the pass takes from State.
  StateFactor FactorOfState = StateFactor::InverseScale;
};

/// The answer of a write pass.
struct WritePassResult {
  bool FoundNonFinite = false;  ///< A written value is Inf or NaN (false unless Check or Amax).
  float Amax = 0.0f;            ///< Largest finite |x * Factor| (0 unless Amax, or when none is finite).
};

/// ArgumentError naming `options` when an Add asks for the check or the amax (no kernel fuses
/// them into the add) or takes a scale state, when a pass with a state asks for Check or Amax
/// (they go into the state), or when Op or FactorOfState is out of range.
inline void ValidateWritePassOptions(const WritePassOptions& options) {
  if (options.Op != WriteOp::Scale && options.Op != WriteOp::Cast && options.Op != WriteOp::Add) {
    throw ArgumentError("options", "Op " + std::to_string(static_cast<int>(options.Op)) + " is not a WriteOp");
  }
  if (options.Op == WriteOp::Add && (options.Check || options.Amax)) {
    throw ArgumentError("options", "asks an Add pass for the non-finite check or the amax; no kernel fuses them");
  }
  if (options.State == nullptr) {
    return;
  }
  if (options.Op == WriteOp::Add) {
    throw ArgumentError("options", "gives an Add pass a scale state; only Scale and Cast take their factor from one");
  }
  if (options.Check || options.Amax) {
    throw ArgumentError("options", "asks a pass with a scale state for Check or Amax; its answer goes into the state");
  }
  if (options.FactorOfState != StateFactor::InverseScale && options.FactorOfState != StateFactor::Scale) {
    throw ArgumentError("options", "FactorOfState " + std::to_string(static_cast<int>(options.FactorOfState)) +
                                       " is not a StateFactor");
  }
}

}  // namespace mlframework
