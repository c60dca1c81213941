#include "FieldMap.hpp"

#include <cctype>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace mlframework::c_api {

namespace {

// The C name of the C++ field @p cpp of @p groups (`config->growth_factor`; a field of a group
// without a parameter is its bare name), or nothing.
std::optional<std::string> CName(std::string_view cpp, std::initializer_list<FieldGroup> groups) {
  for (const FieldGroup& group : groups) {
    for (const FieldName& name : group.names) {
      if (cpp == name.cpp) {
        return *group.parameter == '\0' ? std::string(name.c) : std::string(group.parameter) + "->" + name.c;
      }
    }
  }
  return std::nullopt;
}

bool IsWordCharacter(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// @p text with each word that is a C++ field of @p groups replaced by its C name.
std::string WithCNamesIn(std::string_view text, std::initializer_list<FieldGroup> groups) {
  std::string result;
  std::size_t i = 0;
  while (i < text.size()) {
    if (!IsWordCharacter(text[i])) {
      result += text[i++];
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && IsWordCharacter(text[end])) {
      ++end;
    }
    const std::string_view word = text.substr(i, end - i);
    const std::optional<std::string> c_name = CName(word, groups);
    result += c_name ? std::string_view(*c_name) : word;
    i = end;
  }
  return result;
}

}  // namespace

void ThrowWithCNames(const ArgumentError& error, std::initializer_list<FieldGroup> groups) {
  // The C++ checks name a field bare (`GrowthFactor`) or in its struct (`config.Margin`).
  const std::string& parameter = error.Parameter();
  const std::size_t dot = parameter.rfind('.');
  const std::optional<std::string> c_name = CName(
      dot == std::string::npos ? std::string_view(parameter) : std::string_view(parameter).substr(dot + 1), groups);
  if (!c_name) {
    throw;  // not a settings field: the error is the caller's as it stands
  }
  if (dynamic_cast<const ArgumentNullError*>(&error) != nullptr) {
    throw ArgumentNullError(*c_name);
  }
  // what() is "invalid argument '<parameter>': <message>"
  const std::string_view what = error.what();
  const std::string head = "invalid argument '" + parameter + "': ";
  throw ArgumentError(*c_name, WithCNamesIn(what.starts_with(head) ? what.substr(head.size()) : what, groups));
}

}  // namespace mlframework::c_api
