#pragma once
// Private: the few C# formatting rules the spec's ToString() methods use, so
// the strings match what the C# code prints (invariant culture).

#include <cmath>
#include <cstdio>
#include <string>

namespace mlframework::optimizers::mixed_precision::detail {

// C# "F<decimals>": fixed point, rounded from the exact binary value (as .NET Core 3.0+ does),
// "NaN", "Infinity" and "-Infinity" for the special values.
inline std::string FormatFixed(double value, int decimals) {
  if (std::isnan(value)) {
    return "NaN";
  }
  if (std::isinf(value)) {
    return value > 0 ? "Infinity" : "-Infinity";
  }
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

// C# bool.ToString().
inline const char* FormatBool(bool value) { return value ? "True" : "False"; }

}  // namespace mlframework::optimizers::mixed_precision::detail
