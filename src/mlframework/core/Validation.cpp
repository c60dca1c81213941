#include "mlframework/core/Validation.hpp"

#include <cmath>
#include <sstream>

#include <mlframework/core/Error.hpp>

namespace mlframework::detail {

std::string Show(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

void RequirePositive(double value, const char* parameter) {
  if (!std::isfinite(value) || value <= 0.0) {
    throw ArgumentError(parameter, "must be finite and > 0, got " + Show(value));
  }
}

void RequireNonNegative(double value, const char* parameter) {
  if (!(value >= 0.0) || !std::isfinite(value)) {
    throw ArgumentError(parameter, "must be finite and >= 0, got " + Show(value));
  }
}

}  // namespace mlframework::detail
