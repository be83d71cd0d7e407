#include "tandem/text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tandem/text/utf8.h"

namespace tandem::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [name, value] : items)
    if (name == key) return &value;
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [name, slot] : items)
    if (name == key) {
      slot = std::move(value);
      return;
    }
  items.emplace_back(key, std::move(value));
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value::Value(bool value) : kind_(Kind::Bool), bool_(value) {}
Value::Value(int value) : kind_(Kind::Int), int_(value) {}
Value::Value(int64_t value) : kind_(Kind::Int), int_(value) {}
Value::Value(double value) : kind_(Kind::Float), float_(value) {}
Value::Value(std::string value)
    : kind_(Kind::String), string_(std::make_shared<const std::string>(std::move(value))) {}
Value::Value(const char* value) : Value(std::string(value)) {}

Value Value::list(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind_ = Kind::List;
  v.tuple_ = tuple;
  v.list_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}

Value Value::dict(Dict dict) {
  Value v;
  v.kind_ = Kind::Dict;
  v.dict_ = std::make_shared<Dict>(std::move(dict));
  return v;
}

Value Value::namespace_(Dict attributes) {
  Value v = dict(std::move(attributes));
  v.kind_ = Kind::Namespace;
  return v;
}

Value Value::callable(std::string name, Function call) {
  Value v;
  v.kind_ = Kind::Callable;
  v.callable_ = std::make_shared<Callable>(Callable{std::move(name), std::move(call)});
  return v;
}

Value Value::undefined(std::string name) {
  Value v;
  v.string_ = std::make_shared<const std::string>(std::move(name));
  return v;
}

const std::string& Value::undefined_name() const {
  static const std::string kNone;
  return kind_ == Kind::Undefined && string_ ? *string_ : kNone;
}

double Value::as_number() const {
  if (kind_ == Kind::Float) return float_;
  if (kind_ == Kind::Bool) return bool_ ? 1.0 : 0.0;
  return static_cast<double>(int_);
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return bool_;
    case Kind::Int:
      return int_ != 0;
    case Kind::Float:
      return float_ != 0.0;
    case Kind::String:
      return !string_->empty();
    case Kind::List:
      return !list_->empty();
    case Kind::Dict:
      return !dict_->items.empty();
    case Kind::Callable:
    case Kind::Namespace:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined:
      return "undefined";
    case Kind::None:
      return "none";
    case Kind::Bool:
      return "boolean";
    case Kind::Int:
      return "integer";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "string";
    case Kind::List:
      return tuple_ ? "tuple" : "list";
    case Kind::Dict:
      return "dict";
    case Kind::Callable:
      return "callable";
    case Kind::Namespace:
      return "namespace";
  }
  return "value";
}

std::optional<Value> CallArgs::take(size_t index, std::string_view name) {
  for (auto it = keyword.begin(); it != keyword.end(); ++it)
    if (it->first == name) {
      Value value = std::move(it->second);
      keyword.erase(it);
      return value;
    }
  if (index < positional.size()) return positional[index];
  return std::nullopt;
}

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  // The shortest round-trip digits, then Python's layout: positional for exponents in
  // [-4, 16), scientific ("1e+16", "1.5e-05") otherwise.
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string text(buffer, result.ptr);
  const size_t e = text.find('e');
  std::string mantissa = text.substr(0, e);
  const int exponent = std::stoi(text.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  std::string out;
  if (exponent >= 16 || exponent < -4) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  } else if (exponent < 0) {
    out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else {
    const size_t integer_digits = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= integer_digits)
      out = digits + std::string(integer_digits - digits.size(), '0') + ".0";
    else
      out = digits.substr(0, integer_digits) + "." + digits.substr(integer_digits);
  }
  return negative ? "-" + out : out;
}

namespace {

std::string string_repr(const std::string& text) {
  // Python picks single quotes unless the text has a single quote and no double quote.
  const bool has_single = text.find('\'') != std::string::npos;
  const bool has_double = text.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == static_cast<unsigned char>(quote))
      out += std::string("\\") + quote;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

void append_json_string(std::string& out, const std::string& text, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\b') {
      out += "\\b";
    } else if (c == '\f') {
      out += "\\f";
    } else if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\u%04x", c);
      out += hex;
    } else if (c >= 0x80 && ensure_ascii) {
      // Valid UTF-8 from here on (the caller's strings are checked); a truncated sequence
      // reads as U+FFFD.
      size_t next = i;
      const bool whole = utf8::sequence_length(c) <= text.size() - i;
      const uint32_t code = whole ? static_cast<uint32_t>(utf8::next(text, next)) : 0xFFFD;
      const size_t length = whole ? next - i : text.size() - i;
      auto escape = [&](uint32_t unit) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "\\u%04x", unit);
        out += hex;
      };
      if (code >= 0x10000) {
        escape(0xD800 + ((code - 0x10000) >> 10));
        escape(0xDC00 + ((code - 0x10000) & 0x3FF));
      } else {
        escape(code);
      }
      i += std::max<size_t>(length, 1);
      continue;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  out += '"';
}

void append_json(std::string& out, const Value& value, const JsonOptions& options, int depth) {
  if (depth > 256) throw Problem("tojson: the value is nested more than 256 levels deep");
  auto newline = [&](int level) {
    out += '\n';
    out += std::string(static_cast<size_t>(std::max<int64_t>(*options.indent, 0) * level), ' ');
  };
  const std::string& item_separator = options.item_separator;
  switch (value.kind()) {
    case Value::Kind::Undefined:
      throw Problem(
          "tojson: '" +
          (value.undefined_name().empty() ? std::string("a value") : value.undefined_name()) +
          "' is undefined");
    case Value::Kind::Callable:
      throw Problem("tojson: a " + value.type_name() + " is not JSON serializable");
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += value.as_bool() ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(value.as_int());
      return;
    case Value::Kind::Float: {
      const double number = value.as_number();
      out += std::isnan(number)   ? "NaN"
             : std::isinf(number) ? (number > 0 ? "Infinity" : "-Infinity")
                                  : float_repr(number);
      return;
    }
    case Value::Kind::String:
      append_json_string(out, value.as_string(), options.ensure_ascii);
      return;
    case Value::Kind::List: {
      const auto& items = value.as_list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_separator;
        if (options.indent) newline(depth + 1);
        append_json(out, items[i], options, depth + 1);
      }
      if (options.indent) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : value.as_dict().items) entries.push_back(&entry);
      if (options.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      if (entries.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_separator;
        if (options.indent) newline(depth + 1);
        append_json_string(out, entries[i]->first, options.ensure_ascii);
        out += options.key_separator;
        append_json(out, entries[i]->second, options, depth + 1);
      }
      if (options.indent) newline(depth);
      out += '}';
      return;
    }
  }
}

}  // namespace

namespace {

constexpr int kMaxDepth = 256;

void check_depth(int depth) {
  if (depth > kMaxDepth)
    throw Problem("a value nested more than " + std::to_string(kMaxDepth) +
                  " levels deep (does it contain itself?)");
}

std::string repr_at(const Value& value, int depth) {
  check_depth(depth);
  switch (value.kind()) {
    case Value::Kind::Undefined:
      return "Undefined";  // Jinja's Undefined.__repr__
    case Value::Kind::String:
      return string_repr(value.as_string());
    case Value::Kind::List: {
      const auto& items = value.as_list();
      std::string out = value.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < items.size(); ++i)
        out += (i ? ", " : "") + repr_at(items[i], depth + 1);
      if (value.is_tuple() && items.size() == 1) out += ",";
      return out + (value.is_tuple() ? ")" : "]");
    }
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, item] : value.as_dict().items) {
        out += (first ? "" : ", ") + string_repr(key) + ": " + repr_at(item, depth + 1);
        first = false;
      }
      out += "}";
      return value.is_namespace() ? "<Namespace " + out + ">" : out;
    }
    default:
      return to_str(value);
  }
}

bool equal_at(const Value& a, const Value& b, int depth);

bool less_at(const Value& a, const Value& b, int depth);

}  // namespace

std::string to_repr(const Value& value) { return repr_at(value, 0); }

std::string to_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::Undefined:
      return "";
    case Value::Kind::None:
      return "None";
    case Value::Kind::Bool:
      return value.as_bool() ? "True" : "False";
    case Value::Kind::Int:
      return std::to_string(value.as_int());
    case Value::Kind::Float:
      return float_repr(value.as_number());
    case Value::Kind::String:
      return value.as_string();
    case Value::Kind::List:
    case Value::Kind::Dict:
    case Value::Kind::Namespace:
      return to_repr(value);
    case Value::Kind::Callable:
      return "<function " + value.as_callable().name + ">";
  }
  return "";
}

std::string to_json(const Value& value, const JsonOptions& options) {
  std::string out;
  append_json(out, value, options, 0);
  return out;
}

bool equal(const Value& a, const Value& b) { return equal_at(a, b, 0); }

bool less(const Value& a, const Value& b) { return less_at(a, b, 0); }

namespace {

bool equal_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  const bool a_number = a.is_number() || a.is_bool(), b_number = b.is_number() || b.is_bool();
  if (a_number && b_number) {
    if (!a.is_float() && !b.is_float())
      return a.as_number() == b.as_number() &&
             (a.is_bool() ? a.as_bool() : a.as_int()) == (b.is_bool() ? b.as_bool() : b.as_int());
    return a.as_number() == b.as_number();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.as_string() == b.as_string();
    case Value::Kind::List: {
      const auto &x = a.as_list(), &y = b.as_list();
      if (x.size() != y.size() || a.is_tuple() != b.is_tuple()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equal_at(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const auto &x = a.as_dict().items, &y = b.as_dict().items;
      if (x.size() != y.size()) return false;
      for (const auto& [key, item] : x) {
        const Value* other = b.as_dict().find(key);
        if (!other || !equal_at(item, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::Namespace:
      return &a.namespace_attributes() == &b.namespace_attributes();
    case Value::Kind::Callable:
      return &a.as_callable() == &b.as_callable();
    default:
      return false;
  }
}

bool less_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  const bool a_number = a.is_number() || a.is_bool(), b_number = b.is_number() || b.is_bool();
  if (a_number && b_number) return a.as_number() < b.as_number();
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const auto &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less_at(x[i], y[i], depth + 1)) return true;
      if (less_at(y[i], x[i], depth + 1)) return false;
    }
    return x.size() < y.size();
  }
  throw Problem("'<' is not supported between a " + a.type_name() + " and a " + b.type_name());
}

}  // namespace

}  // namespace tandem::jinja
