#include <mlframework/fp8/IScalingRecipe.hpp>

namespace mlframework::fp8 {

IScalingRecipe::~IScalingRecipe() = default;

}  // namespace mlframework::fp8
