#pragma once
// The C API's settings structs and the C++ settings they stand for, in one list of field pairs
// per struct: the caller's struct becomes the C++ settings, and the C++ defaults fill the
// caller's struct (mlfw_*_default()), from the same list.

#include <cstddef>
#include <tuple>
#include <type_traits>

#include "EnumMap.hpp"

namespace mlframework::c_api {

/// A field of the C struct @p C and the field of the C++ settings @p Cpp it mirrors: of the
/// same type, or a C int for a C++ bool (non-zero is true).
template <class C, class Cpp, class CField, class CppField>
class Field {
 public:
  using CStruct = C;
  using CppStruct = Cpp;

  constexpr Field(CField C::*c, CppField Cpp::*cpp) : c_(c), cpp_(cpp) {}

  void ToCpp(const C& from, Cpp& to) const {
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
};

/// A C enum field of @p C and the C++ enum field of @p Cpp it mirrors, through @p map; a value
/// of none of the C enumerators is an ArgumentError naming @p parameter.
template <class C, class Cpp, class CEnum, class CppEnum, std::size_t N>
class EnumField {
 public:
  using CStruct = C;
  using CppStruct = Cpp;

  constexpr EnumField(CEnum C::*c, CppEnum Cpp::*cpp, const EnumMap<CEnum, CppEnum, N>& map, const char* parameter)
      : c_(c), cpp_(cpp), map_(&map), parameter_(parameter) {}

  void ToCpp(const C& from, Cpp& to) const { to.*cpp_ = map_->ToCpp(from.*c_, parameter_); }
  void ToC(const Cpp& from, C& to) const { to.*c_ = map_->ToC(from.*cpp_); }

 private:
  CEnum C::*c_;
  CppEnum Cpp::*cpp_;
  const EnumMap<CEnum, CppEnum, N>* map_;
  const char* parameter_;
};

/// The fields (Field, EnumField) of one C settings struct and its C++ settings, converted both
/// ways in the order listed. Fields not listed keep their defaults (C: zero).
template <class... Fields>
class FieldMap {
  using First = std::tuple_element_t<0, std::tuple<Fields...>>;

 public:
  using C = typename First::CStruct;
  using Cpp = typename First::CppStruct;

  constexpr explicit FieldMap(Fields... fields) : fields_(fields...) {}

  /// The C++ settings of the caller's @p from (the enum fields checked in the order listed).
  Cpp ToCpp(const C& from) const {
    Cpp to{};
    std::apply([&](const auto&... field) { (field.ToCpp(from, to), ...); }, fields_);
    return to;
  }

  /// The C struct of the C++ settings @p from.
  C ToC(const Cpp& from) const {
    C to{};
    std::apply([&](const auto&... field) { (field.ToC(from, to), ...); }, fields_);
    return to;
  }

 private:
  std::tuple<Fields...> fields_;
};

}  // namespace mlframework::c_api
