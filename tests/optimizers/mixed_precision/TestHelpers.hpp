#pragma once
// Small helpers shared by the mixed-precision suites.

#include <limits>
#include <ostream>
#include <vector>

#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/core/DataType.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "NonFinite.hpp"

// Boost.Test prints the operands of a failed check (found by argument-dependent lookup).
namespace mlframework {
// Boost.Test customization point: the name is Boost's.
inline std::ostream& boost_test_print_type(  // NOLINT(readability-identifier-naming)
    std::ostream& out, DataType dtype) {
  return out << ToString(dtype);
}
// Boost.Test customization point: the name is Boost's.
inline std::ostream& boost_test_print_type(  // NOLINT(readability-identifier-naming)
    std::ostream& out, const ScaleState& s) {
  return out << "{Scale " << s.Scale << ", clean " << s.StepsSinceLastOverflow << ", consecutive "
             << s.ConsecutiveOverflows << ", overflows " << s.TotalOverflows << ", steps " << s.TotalSteps << "}";
}
}  // namespace mlframework

namespace mlfw_test {

// A 1-D tensor of @p values in @p dtype.
inline mlframework::TensorPtr Vec(const std::vector<float>& values,
                                  mlframework::DataType dtype = mlframework::DataType::Float32) {
  return mlframework::FromVector(values, {values.size()}, dtype);
}

// The elements of @p tensor as floats.
inline std::vector<float> Values(const mlframework::TensorPtr& tensor) { return tensor->ToFloatVector(); }

}  // namespace mlfw_test
