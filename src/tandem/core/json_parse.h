#pragma once
// Parsing the JSON tandem reads (safetensors headers, config.json, tokenizer.json, index files,
// manifests, JSONL lines) in time linear in its size, with a bound on nesting (a value nested
// tens of thousands deep overflows the stack when it is copied or destroyed) and, where asked,
// no key repeated within an object. nlohmann's own callback parser, the obvious tool for such
// checks, rescans an object's members after each of them: quadratic in the number of entries.
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem {

struct JsonLimits {
  int max_depth = 64;        // objects and arrays open at once
  bool unique_keys = false;  // a repeated key in an object is an error (nlohmann keeps one)
};

/// What is wrong with a JSON text; the message says what, the caller adds where.
class JsonTextError : public std::runtime_error {
 public:
  enum class Kind { invalid, too_deep, duplicate_key };
  JsonTextError(Kind kind, const std::string& message, std::string key = "", std::string entry = "",
                int depth = 0);
  Kind kind;
  std::string key;    // duplicate_key: the repeated key
  std::string entry;  // duplicate_key: the top-level key it sits under ("" at the top level)
  int depth;          // duplicate_key: 1 at the top level
};

/// Parses `text` within `limits`; throws JsonTextError (invalid: nlohmann's message from
/// "parse error" on, number overflow included; too_deep; duplicate_key).
nlohmann::json parse_json_text(std::string_view text, const JsonLimits& limits = {});

}  // namespace tandem
