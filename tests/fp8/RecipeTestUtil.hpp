#pragma once
// Helpers of the FP8 recipe tests: reading one-element state views, bit comparisons, and the
// reference scale rule written from its definition (Transformer Engine's DelayedScaling).

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include <mlframework/fp8/IScalingRecipe.hpp>
#include <mlframework/mlframework.hpp>

namespace mlfw_test {

inline std::uint32_t Bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline float ValueOf(const mlframework::TensorPtr& one) { return one->ToFloatVector().at(0); }

// Records @p amax as the current step's amax of @p name (what a cast of a tensor with that
// amax, or an all-reduce writing the agreed amax back, leaves in the state).
inline void RecordAmax(mlframework::fp8::IScalingRecipe& recipe, const std::string& name, float amax) {
  const std::vector<float> value{amax};
  recipe.Amax(name)->CopyFromFloats(value);
}

// The scale rule: (fp8_max / amax) / 2^margin in FP32, clamped into [FLT_MIN, FLT_MAX]; a zero
// or non-finite amax keeps the previous scale.
inline float ReferenceScale(float amax, float fp8_max, int margin, float previous) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return previous;
  float scale = (fp8_max / amax) / std::ldexp(1.0f, margin);
  if (std::isinf(scale)) scale = FLT_MAX;
  if (scale < FLT_MIN) scale = FLT_MIN;
  return scale;
}

// One tensor's delayed scaling, modelled as a window of the last H recorded amaxes.
struct ReferenceDelayed {
  std::size_t history = 1;
  bool most_recent = false;
  int margin = 0;
  float fp8_max = 448.0f;
  std::deque<float> window;  // newest first
  float scale = 1.0f;

  void Step(float amax) {
    window.push_front(amax);
    while (window.size() > history) window.pop_back();
    float reduced = 0.0f;
    for (const float a : window) reduced = std::fmax(reduced, a);  // fmaxf: NaN skipped
    scale = ReferenceScale(most_recent ? amax : reduced, fp8_max, margin, scale);
  }
};

}  // namespace mlfw_test
