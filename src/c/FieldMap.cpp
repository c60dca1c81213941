#include "FieldMap.hpp"

#include <array>
#include <cctype>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

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

// Words of the C++ checks' messages that C spells otherwise: the state formats that are no
// other enum's values (StateFormat::UInt8Block is MLFW_STATE_UINT8_BLOCK).
constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kCWords{{
    {"Int8Block", "MLFW_STATE_INT8_BLOCK"},
    {"UInt8Block", "MLFW_STATE_UINT8_BLOCK"},
    {"Float8E4M3Block", "MLFW_STATE_FLOAT8_E4M3_BLOCK"},
}};

// C++-only advice of the C++ checks and what a C caller does instead, in C++ field names (the
// fields are renamed after).
constexpr std::array<std::pair<std::string_view, std::string_view>, 1> kCAdvice{{
    {"use MixedPrecisionOptions::ForFP32()", "set EnableDynamicLossScaling to 0"},
}};

std::optional<std::string_view> CWord(std::string_view cpp) {
  for (const auto& [word, c_word] : kCWords) {
    if (cpp == word) {
      return c_word;
    }
  }
  return std::nullopt;
}

bool IsWordCharacter(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// @p text with its C++-only advice replaced, then each word that is a C++ field of @p groups
// replaced by its C name, and each C++ enumerator of kCWords by the C one.
std::string WithCNamesIn(std::string_view cpp_text, std::initializer_list<FieldGroup> groups) {
  std::string advised(cpp_text);
  for (const auto& [advice, c_advice] : kCAdvice) {
    for (std::size_t at = advised.find(advice); at != std::string::npos;
         at = advised.find(advice, at + c_advice.size())) {
      advised.replace(at, advice.size(), c_advice);
    }
  }
  const std::string_view text = advised;
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
    const std::optional<std::string_view> c_word = CWord(word);
    result += c_name ? std::string_view(*c_name) : c_word.value_or(word);
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
