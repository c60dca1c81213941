#pragma once
// Private: the checks of numeric arguments every area makes, so their messages read alike
// ("must be finite and > 0, got 0.5").

#include <string>

namespace mlframework::detail {

/// @p value as the messages print numbers (std::ostream's default: 6 significant digits, inf, nan).
std::string Show(double value);
/// ArgumentError naming @p parameter unless @p value is finite and > 0.
void RequirePositive(double value, const char* parameter);
/// ArgumentError naming @p parameter unless @p value is finite and >= 0.
void RequireNonNegative(double value, const char* parameter);

}  // namespace mlframework::detail
