#pragma once
// FP8 storage for the MLP's tensors under one of the library's scaling recipes:
// a tensor is quantized with its recipe scale (which records its amax) and
// decoded back to FP32, so BLAS multiplies exactly the values FP8 storage holds.

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/fp8/IScalingRecipe.hpp>

#include "Mlp.hpp"

namespace fashion_mnist {

/// Round trips FP32 values through FP8 under an mlframework::fp8::IScalingRecipe.
class Fp8Codec {
 public:
  /// Uses @p recipe (not owned; it must outlive the codec) for every tensor.
  explicit Fp8Codec(mlframework::fp8::IScalingRecipe& recipe) : recipe_(recipe) {}

  /// Quantizes @p src into the FP8 type the recipe gives @p name (registered with @p role on first
  /// use) and writes the decoded FP32 values to @p dst (same size; may alias @p src). When @p count
  /// is given, counts the non-zero values of @p src that decoded to zero.
  void RoundTrip(const std::string& name, mlframework::fp8::TensorRole role, std::span<const float> src,
                 std::span<float> dst, UnderflowCount* count);

  /// Process CPU time (all threads) spent in RoundTrip() so far: the scaling code's share of a step.
  double Seconds() const { return seconds_; }

  /// The recipe.
  mlframework::fp8::IScalingRecipe& Recipe() { return recipe_; }
  /// Names in the order they were first used (the recipe's registration order).
  std::vector<std::string> Names() const { return recipe_.Names(); }

 private:
  struct Slot {
    mlframework::TensorPtr wide;    // FP32 staging of the values
    mlframework::TensorPtr narrow;  // the FP8 storage
  };
  mlframework::fp8::IScalingRecipe& recipe_;
  std::map<std::string, Slot> slots_;
  double seconds_ = 0.0;
};

}  // namespace fashion_mnist
