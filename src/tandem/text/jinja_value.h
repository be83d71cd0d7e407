#pragma once
// The values a chat template computes with, with the semantics of Python and Jinja as
// transformers renders templates: truthiness, equality and ordering, `str()` and `repr()` text,
// and `tojson` as transformers' filter writes it (json.dumps with ensure_ascii off).
//
// Lists and dicts are shared (copying a Value copies a reference), as in Python; templates cannot
// change them in place (the sandbox transformers renders in refuses it), only a namespace's
// attributes.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::jinja {

/// An error in rendering, before the renderer adds where in the template it happened.
class Problem : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Value;
struct CallArgs;
using Function = std::function<Value(CallArgs&)>;

/// Keys in insertion order, as Python dicts keep them.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

struct Callable {
  std::string name;
  Function call;
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Callable, Namespace };

  Value() = default;  // undefined
  static Value none();
  Value(bool value);
  Value(int value);
  Value(int64_t value);
  Value(double value);
  Value(std::string value);
  Value(const char* value);
  static Value list(std::vector<Value> items = {}, bool tuple = false);
  static Value dict(Dict dict = {});
  static Value namespace_(Dict attributes = {});
  static Value callable(std::string name, Function call);
  /// An undefined value that remembers the name it stands for (errors name it).
  static Value undefined(std::string name);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::List && tuple_; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_callable() const { return kind_ == Kind::Callable; }
  /// Dicts and namespaces: what `mapping` tests true for.
  bool is_mapping() const { return kind_ == Kind::Dict || kind_ == Kind::Namespace; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }
  /// Ints, floats and bools as a double.
  double as_number() const;
  const std::string& as_string() const { return *string_; }
  const std::vector<Value>& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }
  Dict& namespace_attributes() const { return *dict_; }
  const Callable& as_callable() const { return *callable_; }
  /// The name an undefined value stands for ("" if none).
  const std::string& undefined_name() const;

  /// Python's truth value (undefined is false).
  bool truthy() const;
  /// "undefined", "none", "boolean", "integer", "float", "string", "list", "tuple", "dict",
  /// "namespace", "callable".
  std::string type_name() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool bool_ = false, tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<std::vector<Value>> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> callable_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  /// The keyword `name`, else the positional at `index`, else nullopt; marks it used.
  std::optional<Value> take(size_t index, std::string_view name);
};

/// Python's str(): what `{{ value }}` writes ("" for undefined, "None", "True", "1.5", a list's
/// repr).
std::string to_str(const Value& value);
/// Python's repr() (strings quoted as Python quotes them).
std::string to_repr(const Value& value);
/// Python's repr() of a float: the shortest text that reads back the same, "1.0", "1e+16".
std::string float_repr(double value);

struct JsonOptions {
  std::optional<int64_t> indent;  // nullopt: one line; else a newline and this many spaces a level
  std::string item_separator = ", ", key_separator = ": ";  // json.dumps' (",", ": ") with indent
  bool sort_keys = false;
  bool ensure_ascii = false;  // transformers' tojson default
};
/// json.dumps(value) with `options`; throws Problem for undefined values and callables.
std::string to_json(const Value& value, const JsonOptions& options = {});

/// Python's ==: 1 == 1.0 == True; lists and dicts by content; undefined equals undefined.
bool equal(const Value& a, const Value& b);
/// Python's <, for numbers, strings and lists; throws Problem naming both types otherwise.
bool less(const Value& a, const Value& b);

}  // namespace tandem::jinja
