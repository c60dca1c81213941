#pragma once
/// @file ScalePolicy.hpp
/// @brief The dynamic loss-scaling rules, written once for every front-end and every backend.
///
/// Plain host/device data in core, below every front end and backend:
/// `amp::DynamicLossScaler`, `optimizers::mixed_precision::DynamicLossScaler`
/// and `distributed::fsdp::FSDPMixedPrecisionManager` all keep a ScaleState
/// and advance it with UpdateScaleState() through a scaling backend
/// (core/DeviceScaling.hpp); the CUDA backend runs the same function in its
/// one-thread update kernel, so the trajectory is identical everywhere.

#include <cstdint>
#include <string>

#include <mlframework/core/HostDevice.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// Configuration of dynamic loss scaling (plain data, usable on the device).
struct ScalePolicy {
  float InitialScale = 65536.0f;       ///< Scale before the first step.
  float GrowthFactor = 2.0f;           ///< Multiplier applied after GrowthInterval clean steps (> 1).
  float BackoffFactor = 0.5f;          ///< Multiplier applied on overflow (0 < f < 1).
  std::int64_t GrowthInterval = 2000;  ///< Consecutive clean steps before growth (>= 1).
  float MinScale = 1.0f;               ///< Lower bound of the scale (> 0).
  float MaxScale = 16777216.0f;        ///< Upper bound of the scale (finite, >= MinScale).
  std::int64_t Hysteresis = 1;         ///< Overflows in a row before the scale backs off (>= 1).
};

/// Field names used in validation messages, so each front-end reports its own names.
struct ScalePolicyFieldNames {
  const char* InitialScale = "InitialScale";      ///< Name of ScalePolicy::InitialScale.
  const char* GrowthFactor = "GrowthFactor";      ///< Name of ScalePolicy::GrowthFactor.
  const char* BackoffFactor = "BackoffFactor";    ///< Name of ScalePolicy::BackoffFactor.
  const char* GrowthInterval = "GrowthInterval";  ///< Name of ScalePolicy::GrowthInterval.
  const char* MinScale = "MinScale";              ///< Name of ScalePolicy::MinScale.
  const char* MaxScale = "MaxScale";              ///< Name of ScalePolicy::MaxScale.
  const char* Hysteresis = "Hysteresis";          ///< Name of ScalePolicy::Hysteresis.
};

/// Throws ArgumentError naming the first invalid field of @p policy and its value:
/// non-finite or non-positive scales, GrowthFactor <= 1, BackoffFactor outside (0, 1),
/// GrowthInterval or Hysteresis < 1, MinScale > MaxScale, InitialScale outside [MinScale, MaxScale].
MLFRAMEWORK_EXPORT void ValidateScalePolicy(const ScalePolicy& policy, const ScalePolicyFieldNames& names = {});

/// Where a dynamic scaler stands (plain data, usable on the device).
struct ScaleState {
  float Scale = 65536.0f;                   ///< Current loss scale.
  std::int64_t StepsSinceLastOverflow = 0;  ///< Clean steps since the last overflow or growth.
  std::int64_t ConsecutiveOverflows = 0;    ///< Overflows in a row (0 after a clean step).
  std::int64_t TotalOverflows = 0;          ///< Overflowed (and so skipped) steps since creation or reset.
  std::int64_t TotalSteps = 0;              ///< Updates since creation or reset.

  /// The state before the first step under @p policy.
  MLFW_HOST_DEVICE static ScaleState Initial(const ScalePolicy& policy) {
    ScaleState state;
    state.Scale = policy.InitialScale;
    return state;
  }
  /// Field-wise equality (used by tests and by checks across ranks).
  friend bool operator==(const ScaleState&, const ScaleState&) = default;
};

/// Advances @p state by one step. Returns true when the step must be skipped (it overflowed).
///
/// - Overflow: counts it, restarts the clean-step count, and when this is at least the
///   `Hysteresis`-th overflow in a row multiplies the scale by BackoffFactor, not below MinScale.
/// - Clean step: clears the overflow run; when the clean-step count reaches GrowthInterval the
///   scale is multiplied by GrowthFactor, not above MaxScale, and the count restarts.
///
/// The scale stays finite and within [MinScale, MaxScale] for any validated policy.
MLFW_HOST_DEVICE inline bool UpdateScaleState(ScaleState& state, const ScalePolicy& policy, bool overflow) {
  ++state.TotalSteps;
  if (overflow) {
    ++state.TotalOverflows;
    ++state.ConsecutiveOverflows;
    state.StepsSinceLastOverflow = 0;
    if (state.ConsecutiveOverflows >= policy.Hysteresis) {
      const float reduced = state.Scale * policy.BackoffFactor;
      state.Scale = reduced > policy.MinScale ? reduced : policy.MinScale;
    }
    return true;
  }
  state.ConsecutiveOverflows = 0;
  ++state.StepsSinceLastOverflow;
  if (state.StepsSinceLastOverflow >= policy.GrowthInterval) {
    const float grown = state.Scale * policy.GrowthFactor;  // may be +Inf; clamped below
    state.Scale = grown < policy.MaxScale ? grown : policy.MaxScale;
    state.StepsSinceLastOverflow = 0;
  }
  return false;
}

}  // namespace mlframework
