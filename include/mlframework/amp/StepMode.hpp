#pragma once
/// @file StepMode.hpp
/// @brief What a step through a GradScaler does after unscaling: one meaning on every class.

#include <cstdint>

namespace mlframework::amp {

/// What `Step(optimizer, mode)` does once the optimizer's gradients are unscaled and checked,
/// the same on GradScaler and GradScalerContext. Every mode returns false when this
/// optimizer's gradients overflowed (its step skipped).
enum class StepMode : std::uint8_t {
  /// `optimizer.Step()` unless the gradients overflowed, then the scale update (spec 004's
  /// `Step(optimizer)`). The default.
  StepAndUpdate = 0,
  /// `optimizer.Step()` unless the gradients overflowed; the scale update waits for
  /// GradScaler::Update() (spec 004's `GradScalerContext.Step(optimizer, updateScale: false)`).
  DeferUpdate = 1,
  /// Neither: the gradients are handed to the optimizer and the decision returned; call
  /// `optimizer.Step()` when it is true, then GradScaler::Update() (spec 004's
  /// `GradScaler.Step(optimizer, optimizerStep: false)`).
  DeferStepAndUpdate = 2,
};

}  // namespace mlframework::amp
