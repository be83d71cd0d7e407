#include "tandem/text/jinja_json.h"

namespace tandem::jinja {

namespace {

template <typename Json>
Value convert(const Json& json) {
  switch (json.type()) {
    case Json::value_t::null:
      return Value::none();
    case Json::value_t::boolean:
      return Value(json.template get<bool>());
    case Json::value_t::number_integer:
      return Value(json.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t value = json.template get<uint64_t>();
      if (value > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(value));
      return Value(static_cast<int64_t>(value));
    }
    case Json::value_t::number_float:
      return Value(json.template get<double>());
    case Json::value_t::string:
      return Value(json.template get<std::string>());
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(convert(item));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      Dict dict;
      dict.items.reserve(json.size());
      for (const auto& [key, item] : json.items())  // keys are unique in a parsed object
        dict.items.emplace_back(key, convert(item));
      return Value::dict(std::move(dict));
    }
    default:
      throw Problem("a JSON value of an unsupported type (binary)");
  }
}

}  // namespace

Value value_from_json(const nlohmann::ordered_json& json) { return convert(json); }

Value value_from_json(const nlohmann::json& json) { return convert(json); }

}  // namespace tandem::jinja
