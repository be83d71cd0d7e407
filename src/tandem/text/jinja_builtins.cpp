#include "tandem/text/jinja_builtins.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "tandem/text/utf8.h"

namespace tandem::jinja {

namespace {

// Bounds on what one builtin call may build (the renderer bounds the output and the steps).
constexpr int64_t kMaxBuilt = int64_t{1} << 24;

[[noreturn]] void problem(const std::string& message) { throw Problem(message); }

std::string undefined_message(const Value& value) {
  return value.undefined_name().empty() ? "a value is undefined"
                                        : "'" + value.undefined_name() + "' is undefined";
}

void require_defined(const Value& value) {
  if (value.is_undefined()) problem(undefined_message(value));
}

const std::string& string_arg(const Value& value, const char* what) {
  if (!value.is_string())
    problem(std::string(what) + " must be a string, not a " + value.type_name());
  return value.as_string();
}

int64_t int_arg(const Value& value, const char* what) {
  if (value.is_int()) return value.as_int();
  if (value.is_bool()) return value.as_bool() ? 1 : 0;
  problem(std::string(what) + " must be an integer, not a " + value.type_name());
}

// A float as an int the way Python's int() truncates it; a value beyond int64 (Python would make
// a big integer) or not finite is a Problem, not undefined behaviour.
int64_t float_to_int(double value) {
  if (!std::isfinite(value) || value >= 9223372036854775808.0 || value < -9223372036854775808.0)
    problem("the number " + float_repr(value) + " does not fit in a 64-bit integer");
  return static_cast<int64_t>(value);
}

void no_extra(const CallArgs& args, size_t positional, const std::string& what) {
  if (args.positional.size() > positional)
    problem(what + " takes at most " + std::to_string(positional) + " argument(s), got " +
            std::to_string(args.positional.size()));
  if (!args.keyword.empty())
    problem(what + " got an unexpected keyword argument '" + args.keyword.front().first + "'");
}

std::string strip(const std::string& text, const Value& chars, bool left, bool right) {
  std::u32string points = to_code_points(text);
  std::u32string set;
  const bool by_set = !chars.is_undefined() && !chars.is_none();
  if (by_set) set = to_code_points(string_arg(chars, "strip's argument"));
  auto strip_it = [&](char32_t c) {
    return by_set ? set.find(c) != std::u32string::npos : utf8::is_python_space(c);
  };
  size_t begin = 0, end = points.size();
  if (left)
    while (begin < end && strip_it(points[begin])) ++begin;
  if (right)
    while (end > begin && strip_it(points[end - 1])) --end;
  return from_code_points(points.substr(begin, end - begin));
}

std::vector<Value> split(const std::string& text, const Value& separator, int64_t max_split,
                         bool from_right) {
  std::vector<Value> parts;
  if (separator.is_undefined() || separator.is_none()) {
    // Runs of whitespace, none at the ends.
    const std::u32string points = to_code_points(text);
    std::vector<std::u32string> words;
    size_t i = 0;
    while (i < points.size()) {
      while (i < points.size() && utf8::is_python_space(points[i])) ++i;
      if (i == points.size()) break;
      size_t j = i;
      while (j < points.size() && !utf8::is_python_space(points[j])) ++j;
      words.push_back(points.substr(i, j - i));
      i = j;
    }
    if (max_split >= 0 && words.size() > 1 &&
        static_cast<uint64_t>(words.size() - 1) > static_cast<uint64_t>(max_split)) {
      // Rejoining keeps the original spacing only approximately; templates do not use this.
      problem("split() with maxsplit and no separator is not supported");
    }
    for (const auto& word : words) parts.emplace_back(from_code_points(word));
    return parts;
  }
  const std::string& sep = string_arg(separator, "split's separator");
  if (sep.empty()) problem("split(): empty separator");
  std::vector<std::string> pieces;
  if (!from_right) {
    size_t start = 0;
    while (max_split < 0 || static_cast<int64_t>(pieces.size()) < max_split) {
      const size_t found = text.find(sep, start);
      if (found == std::string::npos) break;
      pieces.push_back(text.substr(start, found - start));
      start = found + sep.size();
    }
    pieces.push_back(text.substr(start));
  } else {
    size_t end = text.size();
    std::vector<std::string> reversed;
    while (max_split < 0 || static_cast<int64_t>(reversed.size()) < max_split) {
      if (end < sep.size()) break;
      const size_t found = text.rfind(sep, end - sep.size());
      if (found == std::string::npos) break;
      reversed.push_back(text.substr(found + sep.size(), end - found - sep.size()));
      end = found;
    }
    reversed.push_back(text.substr(0, end));
    pieces.assign(reversed.rbegin(), reversed.rend());
  }
  for (auto& piece : pieces) parts.emplace_back(std::move(piece));
  return parts;
}

std::string replace_all(const std::string& text, const std::string& from, const std::string& to,
                        int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    const std::u32string points = to_code_points(text);
    int64_t done = 0;
    for (size_t i = 0; i <= points.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < points.size()) out += from_code_points(points.substr(i, 1));
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t found = text.find(from, start);
    if (found == std::string::npos) break;
    out.append(text, start, found - start);
    out += to;
    if (static_cast<int64_t>(out.size()) > kMaxBuilt)
      problem("replace() builds a string too large");
    start = found + from.size();
    ++done;
  }
  out.append(text, start, std::string::npos);
  return out;
}

// ASCII case mapping (templates change the case of role names and keywords).
std::string ascii_case(const std::string& text, bool upper) {
  std::string out = text;
  for (char& c : out)
    if (upper ? (c >= 'a' && c <= 'z') : (c >= 'A' && c <= 'Z')) c = static_cast<char>(c ^ 0x20);
  return out;
}

std::string title_case(const std::string& text) {
  std::string out = text;
  bool start = true;
  for (char& c : out) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (letter) {
      if (start && c >= 'a' && c <= 'z') c = static_cast<char>(c ^ 0x20);
      if (!start && c >= 'A' && c <= 'Z') c = static_cast<char>(c ^ 0x20);
    }
    start = !letter && !(c >= '0' && c <= '9');
  }
  return out;
}

Value call_method(const Value& object, const std::string& name, CallArgs& args) {
  const std::string what = object.type_name() + "." + name + "()";
  if (object.is_string()) {
    const std::string& text = object.as_string();
    if (name == "startswith" || name == "endswith") {
      const auto needle = args.take(0, "prefix");
      if (!needle) problem(what + " needs an argument");
      std::vector<Value> options =
          needle->is_list() ? needle->as_list() : std::vector<Value>{*needle};
      for (const Value& option : options) {
        const std::string& s = string_arg(option, what.c_str());
        if (name == "startswith"
                ? text.rfind(s, 0) == 0
                : text.size() >= s.size() && text.compare(text.size() - s.size(), s.size(), s) == 0)
          return Value(true);
      }
      return Value(false);
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      no_extra(args, 1, what);
      const Value chars = args.positional.empty() ? Value() : args.positional[0];
      return Value(strip(text, chars, name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
      const Value separator = args.take(0, "sep").value_or(Value());
      const int64_t max_split =
          int_arg(args.take(1, "maxsplit").value_or(Value(int64_t{-1})), "maxsplit");
      return Value::list(split(text, separator, max_split, name == "rsplit"));
    }
    if (name == "splitlines") {
      std::vector<Value> lines;
      size_t start = 0;
      for (size_t i = 0; i < text.size(); ++i)
        if (text[i] == '\n' || text[i] == '\r') {
          lines.emplace_back(text.substr(start, i - start));
          if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
          start = i + 1;
        }
      if (start < text.size()) lines.emplace_back(text.substr(start));
      return Value::list(std::move(lines));
    }
    if (name == "lower" || name == "upper") return Value(ascii_case(text, name == "upper"));
    if (name == "title") return Value(title_case(text));
    if (name == "capitalize") {
      std::string out = ascii_case(text, false);
      if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] ^ 0x20);
      return Value(out);
    }
    if (name == "replace") {
      const auto from = args.take(0, "old"), to = args.take(1, "new");
      if (!from || !to) problem(what + " needs two arguments");
      const int64_t count = int_arg(args.take(2, "count").value_or(Value(int64_t{-1})), "count");
      return Value(
          replace_all(text, string_arg(*from, what.c_str()), string_arg(*to, what.c_str()), count));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "count") {
      const auto needle = args.take(0, "sub");
      if (!needle) problem(what + " needs an argument");
      const std::string& s = string_arg(*needle, what.c_str());
      if (name == "count") {
        if (s.empty()) return Value(length_of(object) + 1);
        int64_t n = 0;
        for (size_t at = text.find(s); at != std::string::npos; at = text.find(s, at + s.size()))
          ++n;
        return Value(n);
      }
      const size_t at = name == "rfind" ? text.rfind(s) : text.find(s);
      if (at == std::string::npos) {
        if (name == "index") problem("substring not found");
        return Value(int64_t{-1});
      }
      return Value(static_cast<int64_t>(to_code_points(text.substr(0, at)).size()));
    }
    if (name == "join") {
      const auto items = args.take(0, "iterable");
      if (!items) problem(what + " needs an argument");
      std::string out;
      bool first = true;
      for (const Value& item : iterate(*items)) {
        if (!first) out += text;
        out += string_arg(item, "join's items");
        first = false;
      }
      return Value(out);
    }
    if (name == "removeprefix" || name == "removesuffix") {
      const auto affix = args.take(0, "affix");
      if (!affix) problem(what + " needs an argument");
      const std::string& s = string_arg(*affix, what.c_str());
      if (name == "removeprefix" && text.rfind(s, 0) == 0) return Value(text.substr(s.size()));
      if (name == "removesuffix" && text.size() >= s.size() &&
          text.compare(text.size() - s.size(), s.size(), s) == 0)
        return Value(text.substr(0, text.size() - s.size()));
      return object;
    }
    if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" ||
        name == "islower" || name == "isupper") {
      if (text.empty()) return Value(false);
      bool cased = false;
      for (char c : text) {
        const unsigned char u = static_cast<unsigned char>(c);
        if (u >= 0x80) problem(what + " on non-ASCII text is not supported");
        const bool ok = name == "isdigit"   ? std::isdigit(u)
                        : name == "isalpha" ? std::isalpha(u)
                        : name == "isspace" ? std::isspace(u)
                        : name == "isalnum" ? std::isalnum(u)
                        : name == "islower" ? !std::isupper(u)
                                            : !std::islower(u);
        if (!ok) return Value(false);
        if (std::isalpha(u)) cased = true;
      }
      return Value(name == "islower" || name == "isupper" ? cased : true);
    }
    if (name == "format") problem("str.format() is not supported in chat templates");
  } else if (object.is_mapping()) {
    const Dict& dict = object.as_dict();
    if (name == "items" || name == "keys" || name == "values") {
      no_extra(args, 0, what);
      std::vector<Value> out;
      for (const auto& [key, value] : dict.items) {
        if (name == "items") out.push_back(Value::list({Value(key), value}, /*tuple=*/true));
        if (name == "keys") out.emplace_back(key);
        if (name == "values") out.push_back(value);
      }
      return Value::list(std::move(out));
    }
    if (name == "get") {
      const auto key = args.take(0, "key");
      if (!key) problem(what + " needs a key");
      const Value fallback = args.take(1, "default").value_or(Value::none());
      if (!key->is_string()) return fallback;
      const Value* found = dict.find(key->as_string());
      return found ? *found : fallback;
    }
    if (name == "copy") return Value::dict(dict);
    static const std::set<std::string> kChanging = {"pop", "popitem", "update", "setdefault",
                                                    "clear"};
    if (kChanging.count(name))
      problem(what +
              " changes the dict: transformers' sandboxed renderer refuses it (use a "
              "namespace)");
  } else if (object.is_list()) {
    const std::vector<Value>& items = object.as_list();
    if (name == "index" || name == "count") {
      const auto needle = args.take(0, "value");
      if (!needle) problem(what + " needs an argument");
      int64_t n = 0;
      for (size_t i = 0; i < items.size(); ++i)
        if (equal(items[i], *needle)) {
          if (name == "index") return Value(static_cast<int64_t>(i));
          ++n;
        }
      if (name == "index") problem("the value is not in the list");
      return Value(n);
    }
    static const std::set<std::string> kChanging = {"append", "extend", "insert",  "pop",
                                                    "remove", "sort",   "reverse", "clear"};
    if (kChanging.count(name))
      problem(what +
              " changes the list: transformers' sandboxed renderer refuses it (build a "
              "new list with +, or use a namespace)");
  }
  problem("'" + object.type_name() + "' has no method '" + name + "'");
}

bool is_method(const Value& object, const std::string& name) {
  static const std::set<std::string> kString = {
      "startswith", "endswith", "strip",   "lstrip",  "rstrip",       "split",        "rsplit",
      "splitlines", "lower",    "upper",   "title",   "capitalize",   "replace",      "find",
      "rfind",      "index",    "count",   "join",    "removeprefix", "removesuffix", "isdigit",
      "isalpha",    "isspace",  "isalnum", "islower", "isupper",      "format"};
  static const std::set<std::string> kDict = {"items", "keys",    "values", "get",        "copy",
                                              "pop",   "popitem", "update", "setdefault", "clear"};
  static const std::set<std::string> kList = {"index", "count",  "append", "extend",  "insert",
                                              "pop",   "remove", "sort",   "reverse", "clear"};
  if (object.is_string()) return kString.count(name) > 0;
  if (object.is_dict()) return kDict.count(name) > 0;
  if (object.is_list()) return kList.count(name) > 0;
  return false;
}

Value bound_method(const Value& object, const std::string& name) {
  return Value::callable(object.type_name() + "." + name, [object, name](CallArgs& args) {
    return call_method(object, name, args);
  });
}

// The value at a dotted attribute path ("a.b", "0.name"), as Jinja's attribute filters read it.
Value attribute_path(const Value& object, const std::string& path) {
  Value current = object;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && part.size() <= 18 &&
                         part.find_first_not_of("0123456789") == std::string::npos;
    current = current.is_undefined() ? Value()
              : numeric ? get_item(current, Value(static_cast<int64_t>(std::stoll(part))))
                        : get_item(current, Value(part));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

std::vector<Value> sequence_arg(const Value& input, const std::string& filter) {
  if (input.is_undefined()) return {};
  if (!input.is_list() && !input.is_mapping() && !input.is_string())
    problem("the " + filter + " filter needs a sequence, not a " + input.type_name());
  return iterate(input);
}

// selectattr / rejectattr / select / reject.
Value select(const std::string& filter, const Value& input, CallArgs& args) {
  const bool by_attribute = filter == "selectattr" || filter == "rejectattr";
  const bool keep = filter == "selectattr" || filter == "select";
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty()) problem(filter + " needs an attribute name");
    attribute = string_arg(args.positional[0], "the attribute");
    next = 1;
  }
  std::string test;
  CallArgs test_args;
  if (args.positional.size() > next) {
    test = string_arg(args.positional[next], "the test name");
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next) + 1,
                                args.positional.end());
  }
  test_args.keyword = args.keyword;
  std::vector<Value> out;
  for (const Value& item : sequence_arg(input, filter)) {
    const Value subject = by_attribute ? attribute_path(item, attribute) : item;
    CallArgs call = test_args;
    const bool passed = test.empty() ? subject.truthy() : apply_test(test, subject, call);
    if (passed == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value map_filter(const Value& input, CallArgs& args) {
  const auto attribute = args.take(99, "attribute");
  std::vector<Value> out;
  if (attribute) {
    const std::optional<Value> fallback = args.take(99, "default");
    for (const Value& item : sequence_arg(input, "map")) {
      Value value = attribute_path(item, to_str(*attribute));
      if (value.is_undefined() && fallback) value = *fallback;
      out.push_back(value);
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty()) problem("map needs a filter name or attribute=");
  const std::string filter = string_arg(args.positional[0], "map's filter name");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : sequence_arg(input, "map")) {
    CallArgs call = rest;
    out.push_back(apply_filter(filter, item, call));
  }
  return Value::list(std::move(out));
}

Value indent_filter(const Value& input, CallArgs& args) {
  const Value width_value = args.take(0, "width").value_or(Value(int64_t{4}));
  const bool first = args.take(1, "first").value_or(Value(false)).truthy();
  const bool blank = args.take(2, "blank").value_or(Value(false)).truthy();
  std::string pad;
  if (width_value.is_string()) {
    pad = width_value.as_string();
  } else {
    const int64_t width = int_arg(width_value, "indent's width");
    if (width < 0 || width > 1024) problem("indent's width must be within 0..1024");
    pad.assign(static_cast<size_t>(width), ' ');
  }
  const std::string text = to_str(input);
  // Lines split as Python's splitlines does for the common separators; a trailing newline kept.
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == '\n') {
      lines.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  const bool trailing_newline = !text.empty() && text.back() == '\n';
  if (start < text.size()) lines.push_back(text.substr(start));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    const bool indented = (i > 0 || first) && (blank || !lines[i].empty());
    if (indented) out += pad;
    out += lines[i];
    if (static_cast<int64_t>(out.size()) > kMaxBuilt) problem("indent builds a string too large");
  }
  if (trailing_newline) out += '\n';
  return Value(out);
}

Value tojson_filter(const Value& input, CallArgs& args) {
  JsonOptions options;
  if (const auto indent = args.take(1, "indent"); indent && !indent->is_none()) {
    const int64_t width = int_arg(*indent, "tojson's indent");
    if (width < 0 || width > 64) problem("tojson's indent must be within 0..64");
    options.indent = width;
    options.item_separator = ",";
  }
  if (const auto ascii = args.take(0, "ensure_ascii")) options.ensure_ascii = ascii->truthy();
  if (const auto separators = args.take(2, "separators"); separators && !separators->is_none()) {
    if (!separators->is_list() || separators->as_list().size() != 2)
      problem("tojson's separators must be a pair of strings");
    options.item_separator = string_arg(separators->as_list()[0], "a separator");
    options.key_separator = string_arg(separators->as_list()[1], "a separator");
  }
  if (const auto sort = args.take(3, "sort_keys")) options.sort_keys = sort->truthy();
  try {
    return Value(to_json(input, options));
  } catch (const std::exception& e) {
    problem(e.what());
  }
}

Value sorted(std::vector<Value> items, bool reverse, const std::string& attribute) {
  auto key = [&](const Value& v) { return attribute.empty() ? v : attribute_path(v, attribute); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? less(key(b), key(a)) : less(key(a), key(b));
  });
  return Value::list(std::move(items));
}

}  // namespace

std::u32string to_code_points(const std::string& text) {
  std::u32string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    if (utf8::sequence_length(static_cast<unsigned char>(text[pos])) > text.size() - pos) {
      out.push_back(0xFFFD);
      break;
    }
    out.push_back(utf8::next(text, pos));
  }
  return out;
}

std::string from_code_points(const std::u32string& text) {
  std::string out;
  for (char32_t c : text) utf8::append(out, c);
  return out;
}

int64_t length_of(const Value& value) {
  if (value.is_undefined()) return 0;
  if (value.is_string()) {
    int64_t n = 0;
    for (char c : value.as_string())
      if (!utf8::is_continuation(static_cast<unsigned char>(c))) ++n;
    return n;
  }
  if (value.is_list()) return static_cast<int64_t>(value.as_list().size());
  if (value.is_mapping()) return static_cast<int64_t>(value.as_dict().items.size());
  problem("object of type '" + value.type_name() + "' has no len()");
}

std::vector<Value> iterate(const Value& value) {
  if (value.is_undefined()) return {};
  if (value.is_list()) return value.as_list();
  if (value.is_mapping()) {
    std::vector<Value> keys;
    for (const auto& entry : value.as_dict().items) keys.emplace_back(entry.first);
    return keys;
  }
  if (value.is_string()) {
    if (value.as_string().size() > (size_t{1} << 22))
      problem("iterating over a string of more than 4 MiB is not supported");
    std::vector<Value> characters;
    for (char32_t c : to_code_points(value.as_string()))
      characters.emplace_back(from_code_points(std::u32string(1, c)));
    return characters;
  }
  problem("'" + value.type_name() + "' object is not iterable");
}

bool contains(const Value& haystack, const Value& needle) {
  if (haystack.is_string()) {
    if (!needle.is_string())
      problem("'in <string>' requires a string on the left, not a " + needle.type_name());
    return haystack.as_string().find(needle.as_string()) != std::string::npos;
  }
  if (haystack.is_mapping())
    return needle.is_string() && haystack.as_dict().find(needle.as_string());
  if (haystack.is_list()) {
    for (const Value& item : haystack.as_list())
      if (equal(item, needle)) return true;
    return false;
  }
  if (haystack.is_undefined()) return false;
  problem("argument of type '" + haystack.type_name() + "' is not iterable");
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) problem(undefined_message(object));
  if (object.is_namespace()) {
    const Value* found = object.as_dict().find(name);
    return found ? *found : Value::undefined(name);
  }
  if (is_method(object, name)) return bound_method(object, name);
  if (object.is_dict()) {
    const Value* found = object.as_dict().find(name);
    if (found) return *found;
  }
  return Value::undefined(name);
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) problem(undefined_message(object));
  if (object.is_mapping()) {
    if (key.is_string()) {
      const Value* found = object.as_dict().find(key.as_string());
      if (found) return *found;
      if (object.is_dict() && is_method(object, key.as_string()))
        return bound_method(object, key.as_string());
      return Value::undefined(key.as_string());
    }
    return Value::undefined(to_str(key));
  }
  if ((object.is_list() || object.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t index = key.is_bool() ? key.as_bool() : key.as_int();
    if (object.is_list()) {
      const int64_t size = static_cast<int64_t>(object.as_list().size());
      if (index < 0) index += size;
      if (index < 0 || index >= size)
        return Value::undefined("[" + std::to_string(key.as_int()) + "]");
      return object.as_list()[static_cast<size_t>(index)];
    }
    const std::u32string points = to_code_points(object.as_string());
    const int64_t size = static_cast<int64_t>(points.size());
    if (index < 0) index += size;
    if (index < 0 || index >= size)
      return Value::undefined("[" + std::to_string(key.as_int()) + "]");
    return Value(from_code_points(points.substr(static_cast<size_t>(index), 1)));
  }
  if (key.is_string()) return get_attribute(object, key.as_string());
  return Value::undefined("[" + to_str(key) + "]");
}

Value get_slice(const Value& object, const Value& start_value, const Value& stop_value,
                const Value& step_value) {
  if (object.is_undefined()) problem(undefined_message(object));
  auto optional_int = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    return int_arg(v, what);
  };
  const int64_t step = optional_int(step_value, "a slice step").value_or(1);
  if (step == 0) problem("slice step cannot be zero");
  std::u32string points;
  int64_t size = 0;
  if (object.is_string()) {
    points = to_code_points(object.as_string());
    size = static_cast<int64_t>(points.size());
  } else if (object.is_list()) {
    size = static_cast<int64_t>(object.as_list().size());
  } else {
    problem("a " + object.type_name() + " cannot be sliced");
  }
  // Python's slice.indices.
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v;
    if (x < 0) x += size;
    if (step > 0) return std::clamp<int64_t>(x, 0, size);
    return std::clamp<int64_t>(x, -1, size - 1);
  };
  const int64_t start = clamp(optional_int(start_value, "a slice start"), step > 0 ? 0 : size - 1);
  const int64_t stop = clamp(optional_int(stop_value, "a slice stop"), step > 0 ? size : -1);
  std::vector<int64_t> indices;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) indices.push_back(i);
  if (object.is_string()) {
    std::u32string out;
    for (int64_t i : indices) out.push_back(points[static_cast<size_t>(i)]);
    return Value(from_code_points(out));
  }
  std::vector<Value> out;
  for (int64_t i : indices) out.push_back(object.as_list()[static_cast<size_t>(i)]);
  return Value::list(std::move(out), object.is_tuple());
}

Value apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  if (name == "trim") {
    const Value chars = args.take(0, "chars").value_or(Value());
    return Value(strip(to_str(input), chars, true, true));
  }
  if (name == "tojson") return tojson_filter(input, args);
  if (name == "length" || name == "count") return Value(length_of(input));
  if (name == "string") return Value(to_str(input));
  if (name == "safe") return input;
  if (name == "lower" || name == "upper") return Value(ascii_case(to_str(input), name == "upper"));
  if (name == "title") return Value(title_case(to_str(input)));
  if (name == "capitalize") {
    std::string out = ascii_case(to_str(input), false);
    if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] ^ 0x20);
    return Value(out);
  }
  if (name == "replace") {
    const auto from = args.take(0, "old"), to = args.take(1, "new");
    if (!from || !to) problem("replace needs two arguments");
    const int64_t count = int_arg(args.take(2, "count").value_or(Value(int64_t{-1})), "count");
    return Value(replace_all(to_str(input), to_str(*from), to_str(*to), count));
  }
  if (name == "join") {
    const std::string separator = to_str(args.take(0, "d").value_or(Value("")));
    const auto attribute = args.take(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : sequence_arg(input, "join")) {
      if (!first) out += separator;
      out += to_str(attribute ? attribute_path(item, to_str(*attribute)) : item);
      first = false;
      if (static_cast<int64_t>(out.size()) > kMaxBuilt) problem("join builds a string too large");
    }
    return Value(out);
  }
  if (name == "items") {
    if (input.is_undefined()) return Value::list();
    if (!input.is_mapping())
      problem("the items filter needs a mapping, not a " + input.type_name());
    CallArgs none;
    return call_method(Value::dict(input.as_dict()), "items", none);
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject")
    return select(name, input, args);
  if (name == "map") return map_filter(input, args);
  if (name == "first" || name == "last") {
    const std::vector<Value> items = sequence_arg(input, name);
    if (items.empty()) return Value::undefined("the " + name + " item of an empty sequence");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "default" || name == "d") {
    const Value fallback = args.take(0, "default_value").value_or(Value(""));
    const bool boolean = args.take(1, "boolean").value_or(Value(false)).truthy();
    if (input.is_undefined() || (boolean && !input.truthy())) return fallback;
    return input;
  }
  if (name == "indent") return indent_filter(input, args);
  if (name == "list") return Value::list(sequence_arg(input, "list"));
  if (name == "unique") {
    std::vector<Value> out;
    for (const Value& item : sequence_arg(input, "unique")) {
      bool seen = false;
      for (const Value& kept : out) seen = seen || equal(kept, item);
      if (!seen) out.push_back(item);
    }
    return Value::list(std::move(out));
  }
  if (name == "reverse") {
    if (input.is_string()) {
      std::u32string points = to_code_points(input.as_string());
      std::reverse(points.begin(), points.end());
      return Value(from_code_points(points));
    }
    std::vector<Value> items = sequence_arg(input, "reverse");
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "sort") {
    const bool reverse = args.take(0, "reverse").value_or(Value(false)).truthy();
    args.take(1, "case_sensitive");
    const auto attribute = args.take(2, "attribute");
    return sorted(sequence_arg(input, "sort"), reverse, attribute ? to_str(*attribute) : "");
  }
  if (name == "dictsort") {
    if (!input.is_mapping()) problem("dictsort needs a mapping, not a " + input.type_name());
    CallArgs none;
    return sorted(call_method(Value::dict(input.as_dict()), "items", none).as_list(), false, "0");
  }
  if (name == "min" || name == "max") {
    const std::vector<Value> items = sequence_arg(input, name);
    if (items.empty()) return Value::undefined("the " + name + " of an empty sequence");
    Value best = items[0];
    for (const Value& item : items)
      if (name == "min" ? less(item, best) : less(best, item)) best = item;
    return best;
  }
  if (name == "sum") {
    const auto attribute = args.take(0, "attribute");
    Value total = args.take(1, "start").value_or(Value(int64_t{0}));
    for (const Value& item : sequence_arg(input, "sum")) {
      const Value v = attribute ? attribute_path(item, to_str(*attribute)) : item;
      if (!v.is_number() && !v.is_bool()) problem("sum needs numbers, got a " + v.type_name());
      int64_t added = 0;
      if (total.is_int() && (v.is_int() || v.is_bool())) {
        if (__builtin_add_overflow(total.as_int(), v.is_bool() ? int64_t{v.as_bool()} : v.as_int(),
                                   &added))
          problem("integer overflow");
        total = Value(added);
      } else {
        total = Value(total.as_number() + v.as_number());
      }
    }
    return total;
  }
  if (name == "abs") {
    if (input.is_int()) {
      if (input.as_int() == INT64_MIN) problem("integer overflow");
      return Value(input.as_int() < 0 ? -input.as_int() : input.as_int());
    }
    if (input.is_float()) return Value(std::fabs(input.as_number()));
    problem("abs needs a number, not a " + input.type_name());
  }
  if (name == "int") {
    const Value fallback = args.take(0, "default").value_or(Value(int64_t{0}));
    if (input.is_int()) return input;
    if (input.is_bool()) return Value(static_cast<int64_t>(input.as_bool()));
    if (input.is_float()) return Value(float_to_int(input.as_number()));
    if (input.is_string()) {
      // int(text), else int(float(text)); text neither reads as gives the default.
      const std::string text = strip(input.as_string(), Value(), true, true);
      std::optional<double> number;
      try {
        size_t used = 0;
        const int64_t v = std::stoll(text, &used, 10);
        if (used == text.size()) return Value(v);
      } catch (const std::exception&) {  // not an integer, or beyond int64: try a float
      }
      try {
        size_t used = 0;
        const double d = std::stod(text, &used);
        if (used == text.size()) number = d;
      } catch (const std::exception&) {
      }
      if (number) return Value(float_to_int(*number));
    }
    return fallback;
  }
  if (name == "float") {
    const Value fallback = args.take(0, "default").value_or(Value(0.0));
    if (input.is_number() || input.is_bool()) return Value(input.as_number());
    if (input.is_string()) {
      try {
        size_t used = 0;
        const std::string text = strip(input.as_string(), Value(), true, true);
        const double d = std::stod(text, &used);
        if (used == text.size()) return Value(d);
      } catch (const std::exception&) {
      }
    }
    return fallback;
  }
  if (name == "round") {
    const int64_t precision =
        int_arg(args.take(0, "precision").value_or(Value(int64_t{0})), "precision");
    const std::string method = to_str(args.take(1, "method").value_or(Value("common")));
    if (!input.is_number()) problem("round needs a number, not a " + input.type_name());
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = input.as_number() * scale;
    // "common" is Python's round(): halves to even.
    const double r = method == "ceil"    ? std::ceil(x)
                     : method == "floor" ? std::floor(x)
                                         : std::nearbyint(x);
    return Value(r / scale);
  }
  if (name == "escape" || name == "e") {
    std::string out;
    for (char c : to_str(input)) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&#34;";
          break;
        case '\'':
          out += "&#39;";
          break;
        default:
          out += c;
      }
    }
    return Value(out);
  }
  if (name == "attr") {  // Python attributes only (a dict's methods), never its items
    const auto attribute = args.take(0, "name");
    if (!attribute) problem("attr needs a name");
    const std::string attribute_name = to_str(*attribute);
    if (input.is_namespace()) return get_attribute(input, attribute_name);
    if (is_method(input, attribute_name)) return bound_method(input, attribute_name);
    return Value::undefined(attribute_name);
  }
  problem("the filter '" + name + "' is not supported in chat templates");
}

bool apply_test(const std::string& name, const Value& input, CallArgs& args) {
  auto argument = [&]() -> Value {
    const auto v = args.take(0, "other");
    if (!v) problem("the test '" + name + "' needs an argument");
    return *v;
  };
  if (name == "defined") return !input.is_undefined();
  if (name == "undefined") return input.is_undefined();
  if (name == "none") return input.is_none();
  if (name == "boolean") return input.is_bool();
  if (name == "true") return input.is_bool() && input.as_bool();
  if (name == "false") return input.is_bool() && !input.as_bool();
  if (name == "integer") return input.is_int();
  if (name == "float") return input.is_float();
  if (name == "number") return input.is_number() || input.is_bool();
  if (name == "string") return input.is_string();
  if (name == "mapping") return input.is_mapping();
  if (name == "iterable")
    return input.is_list() || input.is_mapping() || input.is_string() || input.is_undefined();
  if (name == "sequence") return input.is_list() || input.is_mapping() || input.is_string();
  if (name == "callable") return input.is_callable();
  if (name == "sameas") {  // Python's `is`: identity for lists and dicts, equality otherwise
    const Value other = argument();
    if (input.is_list() && other.is_list()) return &input.as_list() == &other.as_list();
    if (input.is_mapping() && other.is_mapping()) return &input.as_dict() == &other.as_dict();
    return input.kind() == other.kind() && equal(input, other);
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(input, argument());
  if (name == "ne" || name == "!=") return !equal(input, argument());
  if (name == "lt" || name == "lessthan" || name == "<") return less(input, argument());
  if (name == "gt" || name == "greaterthan" || name == ">") return less(argument(), input);
  if (name == "le" || name == "<=") return !less(argument(), input);
  if (name == "ge" || name == ">=") return !less(input, argument());
  if (name == "in") return contains(argument(), input);
  if (name == "odd" || name == "even") {
    const int64_t v = int_arg(input, "the odd/even test's value");
    return name == "odd" ? (v % 2 != 0) : (v % 2 == 0);
  }
  if (name == "divisibleby") {
    const int64_t d = int_arg(argument(), "divisibleby's argument");
    if (d == 0) problem("divisibleby 0");
    return int_arg(input, "divisibleby's value") % d == 0;
  }
  if (name == "lower" || name == "upper") {
    const std::string text = to_str(input);
    return text == ascii_case(text, name == "upper");
  }
  problem("the test '" + name + "' is not supported in chat templates");
}

}  // namespace tandem::jinja
