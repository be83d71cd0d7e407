#pragma once
// Reading a JSON file with errors that name the component and the file.
#include <nlohmann/json.hpp>
#include <string>

namespace tandem {

/// Parses `path` (nesting bounded: core/json_parse.h). Errors: "[component] path: cannot
/// open<hint>" and "[component] path: invalid JSON: <what is wrong>".
nlohmann::json read_json_file(const std::string& path, const std::string& component,
                              const std::string& hint = "");

}  // namespace tandem
