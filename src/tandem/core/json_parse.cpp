#include "tandem/core/json_parse.h"

#include <optional>
#include <unordered_set>
#include <vector>

namespace tandem {

namespace {

using json = nlohmann::json;

// One pass over the text without building it: nesting depth and repeated keys. Stops at the
// first problem, which it keeps.
class StructureCheck : public nlohmann::json_sax<json> {
 public:
  explicit StructureCheck(const JsonLimits& limits) : limits_(limits) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return open();
  }
  bool key(string_t& key) override {
    if (keys_.size() == 1) entry_ = key;
    if (!limits_.unique_keys || keys_.back().insert(key).second) return true;
    const int depth = static_cast<int>(keys_.size());
    problem(JsonTextError::Kind::duplicate_key,
            "duplicate key '" + key + "'" + (depth > 1 ? " inside '" + entry_ + "'" : ""), key,
            depth > 1 ? entry_ : "", depth);
    return false;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& error) override {
    // nlohmann's message starts "[json.exception.parse_error.101] parse error at line 1, ...".
    const std::string what = error.what();
    const size_t start = what.find("] ");
    problem(JsonTextError::Kind::invalid,
            start == std::string::npos ? what : what.substr(start + 2));
    return false;
  }

  const JsonTextError* error() const { return error_ ? &*error_ : nullptr; }

 private:
  bool open() {
    if (++depth_ <= limits_.max_depth) return true;
    problem(JsonTextError::Kind::too_deep,
            "nests deeper than " + std::to_string(limits_.max_depth) + " levels");
    return false;
  }
  void problem(JsonTextError::Kind kind, const std::string& message, const std::string& key = "",
               const std::string& entry = "", int depth = 0) {
    if (!error_) error_.emplace(kind, message, key, entry, depth);
  }

  JsonLimits limits_;
  int depth_ = 0;
  std::vector<std::unordered_set<std::string>> keys_;  // one set per open object
  std::string entry_;
  std::optional<JsonTextError> error_;
};

}  // namespace

JsonTextError::JsonTextError(Kind kind, const std::string& message, std::string key,
                             std::string entry, int depth)
    : std::runtime_error(message),
      kind(kind),
      key(std::move(key)),
      entry(std::move(entry)),
      depth(depth) {}

json parse_json_text(std::string_view text, const JsonLimits& limits) {
  StructureCheck check(limits);
  json::sax_parse(text.begin(), text.end(), &check);
  if (check.error()) throw *check.error();
  try {
    return json::parse(text.begin(), text.end());  // checked above: linear, shallow
  } catch (const json::exception& error) {
    throw JsonTextError(JsonTextError::Kind::invalid, error.what());
  }
}

}  // namespace tandem
