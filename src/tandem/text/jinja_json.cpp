#include "tandem/text/jinja_json.h"

namespace tandem::jinja {

Value value_from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t value = json.get<uint64_t>();
      if (value > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(value));
      return Value(static_cast<int64_t>(value));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(value_from_json(item));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict dict;
      for (const auto& [key, item] : json.items()) dict.set(key, value_from_json(item));
      return Value::dict(std::move(dict));
    }
    default:
      throw Problem("a JSON value of an unsupported type (binary)");
  }
}

}  // namespace tandem::jinja
