#pragma once
/// @file IOptimizer.hpp
/// @brief What GradScaler needs from an optimizer; implement it for your own optimizers.

#include <mlframework/core/ITensor.hpp>
#include <mlframework/export.hpp>

namespace mlframework::amp {

class IOptimizerState;

/// An optimizer as GradScaler sees it: it hands out its gradients, takes
/// replaced (unscaled) gradients back, and steps.
class MLFRAMEWORK_EXPORT IOptimizer {
 public:
  virtual ~IOptimizer();
  /// The gradients the next Step() will apply, by parameter name.
  virtual GradientMap GetGradients() = 0;
  /// Replaces the gradients the next Step() will apply (for example with unscaled FP32 copies).
  virtual void SetGradients(const GradientMap& gradients) = 0;
  /// Applies the current gradients to the parameters.
  virtual void Step() = 0;
  /// The optimizer's state as checkpoints move it (IOptimizerState.hpp), or null when it does
  /// not hand its state out (the default): FSDP's resharding checkpoints refuse such an
  /// optimizer. optimizers::Adam and optimizers::SGD return themselves.
  virtual IOptimizerState* State() noexcept;

 protected:
  /// Only implementations construct the interface.
  IOptimizer() = default;
  /// Implementations may be copyable.
  IOptimizer(const IOptimizer&) = default;
  /// Implementations may be copy-assignable.
  IOptimizer& operator=(const IOptimizer&) = default;
};

}  // namespace mlframework::amp
