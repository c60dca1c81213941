#pragma once
// The C API's settings structs and the C++ settings they stand for, in one list of field pairs
// per struct: the caller's struct becomes the C++ settings, and the C++ defaults fill the
// caller's struct (mlfw_*_default()), from the same list. The same list names the C fields in
// the errors of the C++ checks (WithCNames), which name the C++ fields.

#include <array>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <mlframework/core/Error.hpp>

#include "EnumMap.hpp"

namespace mlframework::c_api {

/// A field of a C settings struct and the C++ field it becomes, by name.
struct FieldName {
  const char* c;    ///< "growth_factor"
  const char* cpp;  ///< "GrowthFactor", as the C++ checks name it
};

/// A field of the C struct @p C and the field of the C++ settings @p Cpp it mirrors: of the
/// same type, or a C int for a C++ bool (non-zero is true).
template <class C, class Cpp, class CField, class CppField>
class Field {
 public:
  using CStruct = C;
  using CppStruct = Cpp;

  constexpr Field(CField C::*c, CppField Cpp::*cpp, FieldName name) : c_(c), cpp_(cpp), name_(name) {}

  constexpr FieldName Name() const { return name_; }

  void ToCpp(const C& from, Cpp& to, const char* /*parameter*/) const {
    if constexpr (std::is_same_v<CppField, bool>) {
      static_assert(std::is_same_v<CField, int>, "a C++ bool is a C int");
      to.*cpp_ = from.*c_ != 0;
    } else {
      to.*cpp_ = CppField{from.*c_};
    }
  }

  void ToC(const Cpp& from, C& to) const {
    if constexpr (std::is_same_v<CppField, bool>) {
      to.*c_ = from.*cpp_ ? 1 : 0;
    } else {
      to.*c_ = CField{from.*cpp_};
    }
  }

 private:
  CField C::*c_;
  CppField Cpp::*cpp_;
  FieldName name_;
};

/// A C enum field of @p C and the C++ enum field of @p Cpp it mirrors, through @p map; a value
/// of none of the C enumerators is an ArgumentError naming the C field (`options->precision`).
template <class C, class Cpp, class CEnum, class CppEnum, std::size_t N>
class EnumField {
 public:
  using CStruct = C;
  using CppStruct = Cpp;

  constexpr EnumField(CEnum C::*c, CppEnum Cpp::*cpp, const EnumMap<CEnum, CppEnum, N>& map, FieldName name)
      : c_(c), cpp_(cpp), map_(&map), name_(name) {}

  constexpr FieldName Name() const { return name_; }

  /// @p parameter names the caller's struct in the error.
  void ToCpp(const C& from, Cpp& to, const char* parameter) const {
    to.*cpp_ = map_->ToCpp(from.*c_, (std::string(parameter) + "->" + name_.c).c_str());
  }
  void ToC(const Cpp& from, C& to) const { to.*c_ = map_->ToC(from.*cpp_); }

 private:
  CEnum C::*c_;
  CppEnum Cpp::*cpp_;
  const EnumMap<CEnum, CppEnum, N>* map_;
  FieldName name_;
};

/// The fields (Field, EnumField) of one C settings struct and its C++ settings, converted both
/// ways in the order listed. Fields not listed keep their defaults (C: zero).
template <class... Fields>
class FieldMap {
  using First = std::tuple_element_t<0, std::tuple<Fields...>>;

 public:
  using C = typename First::CStruct;
  using Cpp = typename First::CppStruct;

  constexpr explicit FieldMap(Fields... fields) : fields_(fields...), names_{fields.Name()...} {}

  /// The C++ settings of the caller's @p from, the argument @p parameter (the enum fields
  /// checked in the order listed, an error naming `parameter->field`).
  Cpp ToCpp(const C& from, const char* parameter) const {
    Cpp to{};
    std::apply([&](const auto&... field) { (field.ToCpp(from, to, parameter), ...); }, fields_);
    return to;
  }

  /// The names of the fields, in the order listed.
  constexpr std::span<const FieldName> Names() const { return names_; }

  /// The C struct of the C++ settings @p from.
  C ToC(const Cpp& from) const {
    C to{};
    std::apply([&](const auto&... field) { (field.ToC(from, to), ...); }, fields_);
    return to;
  }

 private:
  std::tuple<Fields...> fields_;
  std::array<FieldName, sizeof...(Fields)> names_;
};

/// A C argument and the C++ settings fields it stands for: a struct the caller passed
/// (`parameter` "config": its fields are `config->growth_factor`), or with `parameter` ""
/// arguments of their own (`fp8_format`).
struct FieldGroup {
  const char* parameter;
  std::span<const FieldName> names;
};

/// @p error thrown again naming the C field of @p groups its parameter is the C++ field of
/// (`GrowthFactor`, `config.Margin`: the C++ checks may prefix the struct), the C++ field names
/// in its message renamed too, and so are the state formats' enumerators (`UInt8Block`:
/// `MLFW_STATE_UINT8_BLOCK`) and advice that only C++ can follow; @p error itself (rethrown:
/// call it in a handler) when its parameter is none of them.
[[noreturn]] void ThrowWithCNames(const ArgumentError& error, std::initializer_list<FieldGroup> groups);

/// Runs @p body, which makes C++ settings out of the caller's structs (@p groups) and hands them
/// to the C++ API, whose checks name the C++ fields: its ArgumentErrors name the C fields.
template <class Body>
decltype(auto) WithCNames(std::initializer_list<FieldGroup> groups, Body&& body) {
  try {
    return std::forward<Body>(body)();
  } catch (const ArgumentError& error) {
    ThrowWithCNames(error, groups);
  }
}

}  // namespace mlframework::c_api
