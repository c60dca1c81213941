#pragma once
// The C API's enums and the C++ enums they stand for, in one table per pair: the C-to-C++
// conversion (which checks the caller's int) and the C++-to-C one read the same entries.

#include <array>
#include <cstddef>
#include <string>

#include <mlframework/core/Error.hpp>

#include "Call.hpp"

namespace mlframework::c_api {

/// One enumerator of a C enum and the C++ value it stands for.
template <class Cpp>
struct EnumEntry {
  int c = 0;              // the C enumerator
  const char* name = "";  // its name, for messages
  Cpp cpp{};              // the C++ value
};

/// A C enum type @p C and the C++ values of its @p N enumerators.
template <class C, class Cpp, std::size_t N>
class EnumMap {
 public:
  /// @p type names the C enum in messages.
  constexpr EnumMap(const char* type, std::array<EnumEntry<Cpp>, N> entries) : type_(type), entries_(entries) {}

  /// The C++ value of the C enum argument or field @p value; ArgumentError naming @p parameter,
  /// the int it holds and the valid enumerators when it is none of them.
  Cpp ToCpp(const C& value, const char* parameter) const {
    const int raw = EnumValue(value);
    for (const EnumEntry<Cpp>& entry : entries_) {
      if (entry.c == raw) {
        return entry.cpp;
      }
    }
    std::string names;
    for (std::size_t i = 0; i < N; ++i) {
      names += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(entries_[i].name);
    }
    throw ArgumentError(parameter, std::to_string(raw) + " is not an " + type_ + " (" + names + ")");
  }

  /// The C enumerator of @p value; InvalidOperationError for a C++ value the C API has no
  /// enumerator for.
  C ToC(Cpp value) const {
    for (const EnumEntry<Cpp>& entry : entries_) {
      if (entry.cpp == value) {
        return static_cast<C>(entry.c);
      }
    }
    throw InvalidOperationError(std::string("the C API has no ") + type_ + " for this value");
  }

 private:
  const char* type_;
  std::array<EnumEntry<Cpp>, N> entries_;
};

}  // namespace mlframework::c_api
