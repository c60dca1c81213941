#pragma once
// Private: the few C# formatting rules the spec's ToString() methods use, so
// the strings match what the C# code prints (invariant culture).

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>

namespace mlframework::optimizers::mixed_precision::detail {

// C# "F<decimals>" as .NET Core 2.1+ prints it (the specs are C# 10, so .NET 6+): the exact
// binary value rounded to the nearest representable result, ties to the even digit
// (docs: "Standard numeric format strings", precision specifier) - which is what glibc's
// printf does with the exact value under the default rounding mode; "NaN", "Infinity" and
// "-Infinity" for the special values (invariant culture).
inline std::string FormatFixed(double value, int decimals) {
  if (std::isnan(value)) {
    return "NaN";
  }
  if (std::isinf(value)) {
    return value > 0 ? "Infinity" : "-Infinity";
  }
  // 309 integer digits, a sign, a point and the decimals always fit.
  std::string text(std::size_t{320} + static_cast<std::size_t>(decimals), '\0');
  const int length = std::snprintf(text.data(), text.size(), "%.*f", decimals, value);
  text.resize(static_cast<std::size_t>(length));
  return text;
}

// C# bool.ToString().
inline const char* FormatBool(bool value) { return value ? "True" : "False"; }

}  // namespace mlframework::optimizers::mixed_precision::detail
