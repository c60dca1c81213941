#pragma once
/// @file ReadPass.hpp
/// @brief What one read pass over a tensor list computes (TensorBackend::Read).

#include <mlframework/core/Error.hpp>

namespace mlframework {

class DeviceScaleState;

/// What a read pass computes besides the non-finite check. At most one of SumOfSquares and Amax.
struct ReadPassOptions {
  /// The sum of squares is of `Factor * x`.
  float Factor = 1.0f;
  /// Also the sum of squares (every value is read).
  bool SumOfSquares = false;
  /// Also the largest finite absolute value, Inf and NaN left out (every value is read). Without
  /// either output the pass may stop at the first non-finite value it finds.
  bool Amax = false;
  /// A dynamic-scaling state (core/DeviceScaling.hpp) whose found-inf flag the pass ORs "an
  /// element is Inf or NaN" into, where the state lives (on a device: the pass does not wait).
  /// SumOfSquares and Amax stay false; the result is empty (the answer is in the state).
  DeviceScaleState* State = nullptr;
};

/// The answer of a read pass.
struct ReadPassResult {
  bool FoundNonFinite = false;  ///< Any element was Inf or NaN.
  double SumOfSquares = 0.0;    ///< Sum of squares of `Factor * x` (0 unless asked for).
  float Amax = 0.0f;            ///< Largest finite |x| (0 unless asked for, or when none is finite).
};

/// ArgumentError naming `options` when it asks for both outputs (no kernel fuses them), or for
/// one of them together with a scale state.
inline void ValidateReadPassOptions(const ReadPassOptions& options) {
  if (options.SumOfSquares && options.Amax) {
    throw ArgumentError("options", "asks for both SumOfSquares and Amax; a read pass computes one of them");
  }
  if (options.State != nullptr && (options.SumOfSquares || options.Amax)) {
    throw ArgumentError("options", "asks a pass with a scale state for SumOfSquares or Amax; it only checks");
  }
}

}  // namespace mlframework
