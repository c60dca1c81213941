#pragma once
// Helpers shared by the optimizer tests.

#include <ostream>
#include <string>
#include <vector>

#include <mlframework/mlframework.hpp>

namespace mlframework {
// Boost.Test prints the operands of a failed check.
inline std::ostream& operator<<(std::ostream& out, DataType dtype) { return out << ToString(dtype); }
}  // namespace mlframework

namespace mlfw_test {

inline std::vector<float> Values(const mlframework::TensorPtr& tensor) { return tensor->ToFloatVector(); }

inline mlframework::GradientMap OneParam(const std::vector<float>& values, mlframework::DataType dtype) {
  return {{"w", mlframework::FromVector(values, {values.size()}, dtype)}};
}

inline mlframework::GradientMap OneGrad(const std::vector<float>& values, mlframework::DataType dtype) {
  return {{"w", mlframework::FromVector(values, {values.size()}, dtype)}};
}

inline float RoundTo(float value, mlframework::DataType dtype) {
  return mlframework::FromVector({value}, {1}, dtype)->ToFloatVector()[0];
}

}  // namespace mlfw_test
