#include "tandem/text/component_config.h"

#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/text/utf8.h"

namespace tandem {

std::string component_type(const nlohmann::json& component) {
  return component.is_object() && component.contains("type") && component["type"].is_string()
             ? component["type"].get<std::string>()
             : std::string();
}

std::shared_ptr<const Regex> read_pattern(const nlohmann::json& component, const std::string& where,
                                          bool allow_empty) {
  const nlohmann::json* pattern =
      component.is_object() && component.contains("pattern") ? &component["pattern"] : nullptr;
  check(pattern && pattern->is_object(), where,
        ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
  const bool literal = pattern->contains("String");
  const char* key = literal ? "String" : "Regex";
  check(pattern->contains(key) && (*pattern)[key].is_string(), where,
        ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
  const std::string text = (*pattern)[key].get<std::string>();
  check(!literal || allow_empty || !text.empty(), where, ".pattern.String is empty");
  return std::make_shared<Regex>(text, literal, where);
}

std::string read_one_character(const nlohmann::json& component, const char* field,
                               const std::string& where) {
  check(component.contains(field) && component[field].is_string(), where, ".", field,
        " must be a one-character string");
  const std::string value = component[field].get<std::string>();
  check(!value.empty() && !utf8::find_invalid(value) &&
            utf8::sequence_length(static_cast<unsigned char>(value[0])) == value.size(),
        where, ".", field, " must be one character, not \"", value, "\"");
  return value;
}

}  // namespace tandem
