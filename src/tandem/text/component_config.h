#pragma once
// Fields every tokenizer.json component reads the same way: its "type", a "pattern" ({"String":
// ...} or {"Regex": ...}, as Split, Replace normalizers and Replace decoders hold it) and a field
// that must be one character (Metaspace's replacement, Strip's content). `where` prefixes errors.
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "tandem/text/regex.h"

namespace tandem {

/// The component's "type", or "" when it has none.
std::string component_type(const nlohmann::json& component);

/// The component's "pattern": a literal for {"String": s} (refused when empty unless
/// `allow_empty`), a regex for {"Regex": r}.
std::shared_ptr<const Regex> read_pattern(const nlohmann::json& component, const std::string& where,
                                          bool allow_empty = false);

/// A string field holding exactly one character.
std::string read_one_character(const nlohmann::json& component, const char* field,
                               const std::string& where);

}  // namespace tandem
