#pragma once
// JSON documents (conversations, tool definitions, template kwargs) as template values, keys in
// the order the document has them (Python's json.loads keeps it, and tojson writes it back).
#include <nlohmann/json.hpp>

#include "tandem/text/jinja_value.h"

namespace tandem::jinja {

/// `json` as a Value: objects as dicts in document order, integers as ints, other numbers as
/// floats.
Value value_from_json(const nlohmann::ordered_json& json);
/// The same for a document whose objects the JSON library keeps sorted by key.
Value value_from_json(const nlohmann::json& json);

}  // namespace tandem::jinja
