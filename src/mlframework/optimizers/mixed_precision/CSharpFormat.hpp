#pragma once
// Private: the few C# formatting rules the spec's ToString() methods use, so
// the strings match what the C# code prints (invariant culture).

#include <cmath>
#include <cstdio>
#include <cstddef>
#include <string>

namespace mlframework::optimizers::mixed_precision::detail {

// C# "F<decimals>" as .NET Core 3.0+ prints it: the exact decimal value of the binary number,
// rounded half away from zero at the last kept digit (printf would round half to even, so
// 0.125 would print "0.12" where C# prints "0.13"); "NaN", "Infinity", "-Infinity".
inline std::string FormatFixed(double value, int decimals) {
  if (std::isnan(value)) {
    return "NaN";
  }
  if (std::isinf(value)) {
    return value > 0 ? "Infinity" : "-Infinity";
  }
  // 1100 decimals hold the exact expansion of any double (glibc prints exact digits).
  constexpr int kExactDecimals = 1100;
  std::string digits(std::size_t{1500}, '\0');
  const int length = std::snprintf(digits.data(), digits.size(), "%.*f", kExactDecimals, std::fabs(value));
  digits.resize(static_cast<std::size_t>(length));
  const std::size_t point = digits.find('.');
  const bool round_up = digits[point + 1 + static_cast<std::size_t>(decimals)] >= '5';
  std::string kept(digits, 0, point);
  kept.append(digits, point + 1, static_cast<std::size_t>(decimals));
  if (round_up) {
    std::size_t i = kept.size();
    while (i > 0 && kept[i - 1] == '9') {
      kept[--i] = '0';
    }
    if (i == 0) {
      kept.insert(kept.begin(), '1');
    } else {
      ++kept[i - 1];
    }
  }
  const std::size_t integer_digits = kept.size() - static_cast<std::size_t>(decimals);
  std::string text;
  text.reserve(kept.size() + 2);
  if (std::signbit(value)) {
    text.push_back('-');
  }
  text.append(kept, 0, integer_digits);
  if (decimals > 0) {
    text.push_back('.');
    text.append(kept, integer_digits, std::string::npos);
  }
  return text;
}

// C# bool.ToString().
inline const char* FormatBool(bool value) { return value ? "True" : "False"; }

}  // namespace mlframework::optimizers::mixed_precision::detail
