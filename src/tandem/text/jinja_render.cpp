// Renders a parsed chat template (text/jinja.h): statements, expressions, scopes, macros, and the
// globals transformers gives templates.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <unordered_map>

#include "tandem/core/error.h"
#include "tandem/text/jinja.h"
#include "tandem/text/jinja_ast.h"
#include "tandem/text/jinja_builtins.h"
#include "tandem/text/jinja_parser.h"
#include "tandem/text/utf8.h"

namespace tandem::jinja {

namespace {

[[noreturn]] void problem(const std::string& message) { throw Problem(message); }

// Bounds on one value an operator builds (a loop doubling a string reaches them in 30 steps).
constexpr size_t kMaxStringBytes = size_t{64} << 20;
constexpr size_t kMaxListItems = size_t{1} << 20;

Value bounded(std::string text) {
  if (text.size() > kMaxStringBytes) problem("a string longer than 64 MiB");
  return Value(std::move(text));
}

// Variables of one level: the globals, the template's top level, a loop body, a macro call.
struct Scope {
  std::unordered_map<std::string, Value> variables;
  std::shared_ptr<Scope> parent;

  const Value* find(const std::string& name) const {
    for (const Scope* scope = this; scope; scope = scope->parent.get()) {
      const auto it = scope->variables.find(name);
      if (it != scope->variables.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr child_of(const ScopePtr& parent) {
  auto scope = std::make_shared<Scope>();
  scope->parent = parent;
  return scope;
}

bool walk_has_generation(const Body& body) {
  for (const auto& stmt : body) {
    if (stmt->kind == Stmt::Kind::Generation) return true;
    for (const auto& branch : stmt->branches)
      if (walk_has_generation(branch.second)) return true;
    if (walk_has_generation(stmt->body) || walk_has_generation(stmt->else_body)) return true;
  }
  return false;
}

// x op y for int64, or a Problem when it overflows.
template <typename Op>
int64_t checked(Op op, int64_t x, int64_t y) {
  int64_t result = 0;
  if (op(x, y, &result)) problem("integer overflow");
  return result;
}
bool add(int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); }
bool subtract(int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); }
bool multiply(int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); }

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  for (const Value* v : {&a, &b})
    if (v->is_undefined())
      problem(v->undefined_name().empty() ? "a value is undefined"
                                          : "'" + v->undefined_name() + "' is undefined");
  const bool numbers = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
  const bool ints = numbers && !a.is_float() && !b.is_float();
  const int64_t x = ints ? (a.is_bool() ? a.as_bool() : a.as_int()) : 0;
  const int64_t y = ints ? (b.is_bool() ? b.as_bool() : b.as_int()) : 0;
  if (op == "+") {
    if (ints) return Value(checked(add, x, y));
    if (numbers) return Value(a.as_number() + b.as_number());
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > kMaxStringBytes)
        problem("a string longer than 64 MiB");
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      if (a.as_list().size() + b.as_list().size() > kMaxListItems)
        problem("a list of more than 1,048,576 items");
      std::vector<Value> items = a.as_list();
      items.insert(items.end(), b.as_list().begin(), b.as_list().end());
      return Value::list(std::move(items), a.is_tuple() && b.is_tuple());
    }
    problem("cannot add a " + a.type_name() + " and a " + b.type_name());
  }
  if (op == "-") {
    if (ints) return Value(checked(subtract, x, y));
    if (numbers) return Value(a.as_number() - b.as_number());
  } else if (op == "*") {
    if (ints) return Value(checked(multiply, x, y));
    if (numbers) return Value(a.as_number() * b.as_number());
    const Value* sequence = a.is_string() || a.is_list() ? &a : &b;
    const Value* count = sequence == &a ? &b : &a;
    if ((sequence->is_string() || sequence->is_list()) && (count->is_int() || count->is_bool())) {
      const int64_t n = std::max<int64_t>(0, count->is_bool() ? count->as_bool() : count->as_int());
      const int64_t unit = sequence->is_string()
                               ? static_cast<int64_t>(sequence->as_string().size())
                               : static_cast<int64_t>(sequence->as_list().size());
      if (unit == 0) return sequence->is_string() ? Value("") : Value::list();
      const int64_t limit = sequence->is_string() ? int64_t{64} << 20 : int64_t{1} << 20;
      if (n > limit / unit) problem("repetition builds a value too large");
      if (sequence->is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += sequence->as_string();
        return Value(out);
      }
      std::vector<Value> out;
      for (int64_t i = 0; i < n; ++i)
        out.insert(out.end(), sequence->as_list().begin(), sequence->as_list().end());
      return Value::list(std::move(out));
    }
  } else if (op == "/") {
    if (numbers) {
      if (b.as_number() == 0) problem("division by zero");
      return Value(a.as_number() / b.as_number());
    }
  } else if (op == "//" || op == "%") {
    if (ints) {
      if (y == 0) problem("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) problem("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;  // Python floors
      return Value(op == "//" ? q : m);
    }
    if (numbers) {
      if (b.as_number() == 0) problem("float division or modulo by zero");
      const double q = std::floor(a.as_number() / b.as_number());
      return Value(op == "//" ? q : a.as_number() - q * b.as_number());
    }
    if (op == "%" && a.is_string()) problem("string formatting with '%' is not supported");
  } else if (op == "**") {
    if (ints && y >= 0) {
      int64_t result = 1;
      for (int64_t i = 0; i < y; ++i) {
        if (__builtin_mul_overflow(result, x, &result)) problem("integer overflow");
        if (result == 0 || result == 1) break;
      }
      return Value(result);
    }
    if (numbers) return Value(std::pow(a.as_number(), b.as_number()));
  }
  problem("unsupported operand types for " + op + ": " + a.type_name() + " and " + b.type_name());
}

class Renderer {
 public:
  Renderer(const std::string& origin, const RenderOptions& options)
      : origin_(origin), options_(options) {}

  // Macros hold the scope they were defined in, and namespaces can hold themselves: both make
  // reference cycles, which nothing outlives the render to need, so they are cut here.
  ~Renderer() {
    for (const ScopePtr& scope : captured_scopes_) scope->variables.clear();
    for (const Value& ns : namespaces_) ns.namespace_attributes().items.clear();
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  Rendered run(const Body& body, const Dict& variables) {
    auto globals = std::make_shared<Scope>();
    add_builtins(*globals);
    for (const auto& [name, value] : variables.items) globals->variables[name] = value;
    auto top = child_of(globals);
    buffers_.emplace_back();
    exec_body(body, top);
    Rendered rendered;
    rendered.text = std::move(buffers_.front());
    rendered.generation_spans = std::move(spans_);
    return rendered;
  }

 private:
  enum class Flow { Normal, Break, Continue };

  [[noreturn]] void fail(Position at, const std::string& message) const {
    throw Error("[chat template] ", origin_, ":", at.line, ":", at.column, ": ", message);
  }

  void step() {
    if (++steps_ > options_.max_steps)
      problem("the template ran more than " + std::to_string(options_.max_steps) +
              " steps (a loop that does not end?)");
  }

  void write(std::string_view text) {
    std::string& out = buffers_.back();
    output_bytes_ += text.size();
    if (output_bytes_ > options_.max_output_bytes)
      problem("the template wrote more than " + std::to_string(options_.max_output_bytes) +
              " bytes");
    out.append(text);
  }

  void add_builtins(Scope& globals) {
    globals.variables["range"] = Value::callable("range", [](CallArgs& args) {
      if (!args.keyword.empty()) problem("range() takes no keyword arguments");
      std::vector<int64_t> n;
      for (const Value& v : args.positional) {
        if (!v.is_int() && !v.is_bool()) problem("range() needs integers, got a " + v.type_name());
        n.push_back(v.is_bool() ? v.as_bool() : v.as_int());
      }
      if (n.empty() || n.size() > 3) problem("range() takes 1 to 3 arguments");
      const int64_t start = n.size() == 1 ? 0 : n[0], stop = n.size() == 1 ? n[0] : n[1];
      const int64_t by = n.size() == 3 ? n[2] : 1;
      if (by == 0) problem("range() step must not be zero");
      std::vector<Value> items;
      for (int64_t i = start; by > 0 ? i < stop : i > stop;) {
        if (items.size() >= (size_t{1} << 20)) problem("range() of more than 1,048,576 items");
        items.emplace_back(i);
        if (__builtin_add_overflow(i, by, &i)) break;  // past the int64 range: past `stop` too
      }
      return Value::list(std::move(items));
    });
    // transformers' namespace refuses underscore-prefixed attributes (a sandbox rule).
    auto check_name = [](const std::string& name) {
      if (!name.empty() && name[0] == '_')
        problem("chat templates cannot store underscore-prefixed attributes on a namespace ('" +
                name + "')");
    };
    auto from_keywords = [](CallArgs& args, const char* what) {
      Dict dict;
      for (const Value& v : args.positional) {
        if (!v.is_mapping()) problem(std::string(what) + "() takes a mapping or keyword arguments");
        for (const auto& [key, value] : v.as_dict().items) dict.set(key, value);
      }
      for (const auto& [key, value] : args.keyword) dict.set(key, value);
      return dict;
    };
    globals.variables["namespace"] =
        Value::callable("namespace", [this, from_keywords, check_name](CallArgs& args) {
          Dict attributes = from_keywords(args, "namespace");
          for (const auto& entry : attributes.items) check_name(entry.first);
          namespaces_.push_back(Value::namespace_(std::move(attributes)));
          return namespaces_.back();
        });
    globals.variables["dict"] = Value::callable("dict", [from_keywords](CallArgs& args) {
      return Value::dict(from_keywords(args, "dict"));
    });
    globals.variables["raise_exception"] =
        Value::callable("raise_exception", [](CallArgs& args) -> Value {
          const std::string message = args.positional.empty() ? "" : to_str(args.positional[0]);
          problem("the template raised an error: " + message);
        });
    const std::time_t now = options_.now.value_or(
        std::chrono::system_clock::to_time_t(std::chrono::system_clock::now()));
    globals.variables["strftime_now"] = Value::callable("strftime_now", [now](CallArgs& args) {
      if (args.positional.size() != 1 || !args.positional[0].is_string())
        problem("strftime_now() takes one format string");
      std::tm parts{};
      gmtime_r(&now, &parts);
      char buffer[256];
      const std::string& format = args.positional[0].as_string();
      if (format.size() > 64) problem("strftime_now(): the format is longer than 64 characters");
      const size_t written = std::strftime(buffer, sizeof(buffer), format.c_str(), &parts);
      return Value(std::string(buffer, written));
    });
  }

  // ---- statements --------------------------------------------------------------------------

  Flow exec_body(const Body& body, const ScopePtr& scope) {
    for (const auto& stmt : body) {
      const Flow flow = exec(*stmt, scope);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& stmt, const ScopePtr& scope) {
    try {
      step();
      return exec_inner(stmt, scope);
    } catch (const Problem& p) {
      fail(stmt.at, p.what());
    }
  }

  std::string capture(const Body& body, const ScopePtr& scope) {
    buffers_.emplace_back();
    exec_body(body, scope);
    std::string out = std::move(buffers_.back());
    buffers_.pop_back();
    return out;
  }

  void assign(const std::vector<std::string>& targets, const Value& value, Scope& scope) {
    if (targets.size() == 1) {
      scope.variables[targets[0]] = value;
      return;
    }
    const std::vector<Value> items = iterate(value);
    if (items.size() != targets.size())
      problem("cannot unpack " + std::to_string(items.size()) + " values into " +
              std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) scope.variables[targets[i]] = items[i];
  }

  Flow exec_inner(const Stmt& stmt, const ScopePtr& scope) {
    switch (stmt.kind) {
      case Stmt::Kind::Text:
        write(stmt.text);
        return Flow::Normal;
      case Stmt::Kind::Output:
        write(to_str(eval(*stmt.expr, scope)));
        return Flow::Normal;
      case Stmt::Kind::If:
        for (const auto& [condition, body] : stmt.branches)
          if (eval(*condition, scope).truthy()) return exec_body(body, scope);
        return exec_body(stmt.else_body, scope);
      case Stmt::Kind::For:
        return exec_for(stmt, scope);
      case Stmt::Kind::Set: {
        const Value value = eval(*stmt.expr, scope);
        if (!stmt.name.empty()) {  // ns.attribute = value
          const Value* target = scope->find(stmt.targets[0]);
          if (!target || !target->is_namespace())
            problem("cannot set '" + stmt.name + "' on '" + stmt.targets[0] +
                    "': only a namespace's attributes can be assigned");
          if (stmt.name[0] == '_')
            problem("chat templates cannot store underscore-prefixed attributes on a namespace ('" +
                    stmt.name + "')");
          target->namespace_attributes().set(stmt.name, value);
        } else {
          assign(stmt.targets, value, *scope);
        }
        return Flow::Normal;
      }
      case Stmt::Kind::SetBlock: {
        Value value(capture(stmt.body, child_of(scope)));
        if (stmt.filter_expr) value = eval_with_block(*stmt.filter_expr, scope, value);
        scope->variables[stmt.name] = value;
        return Flow::Normal;
      }
      case Stmt::Kind::FilterBlock: {
        const Value block(capture(stmt.body, scope));
        write(to_str(eval_with_block(*stmt.filter_expr, scope, block)));
        return Flow::Normal;
      }
      case Stmt::Kind::Macro:
        scope->variables[stmt.name] = make_macro(stmt, scope);
        return Flow::Normal;
      case Stmt::Kind::CallBlock: {
        const Value caller = make_caller(stmt, scope);
        write(to_str(eval_call(*stmt.expr, scope, &caller)));
        return Flow::Normal;
      }
      case Stmt::Kind::Generation: {
        if (buffers_.size() != 1)
          problem("{% generation %} inside a macro, call, filter or set block is not supported");
        const size_t begin = buffers_.front().size();
        const Flow flow = exec_body(stmt.body, scope);
        spans_.emplace_back(begin, buffers_.front().size());
        return flow;
      }
      case Stmt::Kind::Break:
        return Flow::Break;
      case Stmt::Kind::Continue:
        return Flow::Continue;
    }
    return Flow::Normal;
  }

  Value eval_with_block(const Expr& filters, const ScopePtr& scope, const Value& block) {
    auto inner = child_of(scope);
    inner->variables["__block__"] = block;
    return eval(filters, inner);
  }

  Flow exec_for(const Stmt& stmt, const ScopePtr& scope) {
    const Value iterable = eval(*stmt.expr, scope);
    if (iterable.is_none()) problem("'NoneType' object is not iterable");
    std::vector<Value> items = iterate(iterable);
    if (iterable.is_mapping() && stmt.targets.size() > 1)
      problem("iterating a dict gives its keys; use .items() to unpack keys and values");
    if (stmt.condition) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        auto probe = child_of(scope);
        assign(stmt.targets, item, *probe);
        if (eval(*stmt.condition, probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(stmt.else_body, scope);
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      auto body_scope = child_of(scope);
      assign(stmt.targets, items[static_cast<size_t>(i)], *body_scope);
      Dict loop;
      loop.set("index", Value(i + 1));
      loop.set("index0", Value(i));
      loop.set("revindex", Value(length - i));
      loop.set("revindex0", Value(length - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == length - 1));
      loop.set("length", Value(length));
      loop.set("depth", Value(int64_t{1}));
      loop.set("depth0", Value(int64_t{0}));
      loop.set("previtem",
               i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("loop.previtem"));
      loop.set("nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)]
                                          : Value::undefined("loop.nextitem"));
      loop.set("cycle", Value::callable("loop.cycle", [i](CallArgs& args) {
                 if (args.positional.empty()) problem("loop.cycle() needs at least one value");
                 return args.positional[static_cast<size_t>(i) % args.positional.size()];
               }));
      body_scope->variables["loop"] = Value::dict(std::move(loop));
      const Flow flow = exec_body(stmt.body, body_scope);
      if (flow == Flow::Break) break;
    }
    return Flow::Normal;
  }

  Value make_macro(const Stmt& macro, const ScopePtr& defining) {
    captured_scopes_.push_back(defining);
    return Value::callable(macro.name, [this, &macro, defining](CallArgs& args) {
      return call_body(macro.name, macro.parameters, macro.body, defining, args, /*is_macro=*/true);
    });
  }

  Value make_caller(const Stmt& call, const ScopePtr& scope) {
    captured_scopes_.push_back(scope);
    return Value::callable("caller", [this, &call, scope](CallArgs& args) {
      return call_body("caller", call.parameters, call.body, scope, args, /*is_macro=*/false);
    });
  }

  Value call_body(const std::string& name, const std::vector<MacroParameter>& parameters,
                  const Body& body, const ScopePtr& defining, CallArgs& args, bool is_macro) {
    if (call_depth_ >= options_.max_call_depth)
      problem("macros call each other more than " + std::to_string(options_.max_call_depth) +
              " deep");
    auto scope = child_of(defining);
    if (is_macro)
      for (auto it = args.keyword.begin(); it != args.keyword.end(); ++it)
        if (it->first == "caller") {
          scope->variables["caller"] = it->second;
          args.keyword.erase(it);
          break;
        }
    if (args.positional.size() > parameters.size())
      problem("'" + name + "' takes at most " + std::to_string(parameters.size()) +
              " argument(s), got " + std::to_string(args.positional.size()));
    for (size_t i = 0; i < parameters.size(); ++i) {
      std::optional<Value> value = args.take(i, parameters[i].name);
      if (!value)
        value = parameters[i].default_value ? eval(*parameters[i].default_value, scope)
                                            : Value::undefined(parameters[i].name);
      scope->variables[parameters[i].name] = *value;
    }
    if (!args.keyword.empty())
      problem("'" + name + "' got an unexpected keyword argument '" + args.keyword.front().first +
              "'");
    ++call_depth_;
    std::string out = capture(body, scope);
    --call_depth_;
    return Value(std::move(out));
  }

  // ---- expressions -------------------------------------------------------------------------

  Value eval(const Expr& expr, const ScopePtr& scope) {
    try {
      step();
      return eval_inner(expr, scope);
    } catch (const Problem& p) {
      fail(expr.at, p.what());
    }
  }

  CallArgs eval_arguments(const Arguments& arguments, const ScopePtr& scope) {
    CallArgs args;
    for (const auto& e : arguments.positional) args.positional.push_back(eval(*e, scope));
    for (const auto& [name, e] : arguments.keyword)
      args.keyword.emplace_back(name, eval(*e, scope));
    return args;
  }

  Value eval_call(const Expr& call, const ScopePtr& scope, const Value* caller) {
    const Value callee = eval(*call.object, scope);
    CallArgs args = eval_arguments(call.arguments, scope);
    if (caller) args.keyword.emplace_back("caller", *caller);
    if (callee.is_callable()) return callee.as_callable().call(args);
    if (callee.is_undefined())
      problem(callee.undefined_name().empty() ? "calling an undefined value"
                                              : "'" + callee.undefined_name() + "' is undefined");
    problem("a " + callee.type_name() + " is not callable");
  }

  Value eval_inner(const Expr& expr, const ScopePtr& scope) {
    switch (expr.kind) {
      case Expr::Kind::Literal:
        return expr.value;
      case Expr::Kind::Name: {
        const Value* found = scope->find(expr.name);
        return found ? *found : Value::undefined(expr.name);
      }
      case Expr::Kind::List: {
        std::vector<Value> items;
        for (const auto& item : expr.items) items.push_back(eval(*item, scope));
        return Value::list(std::move(items), expr.is_tuple);
      }
      case Expr::Kind::DictLit: {
        Dict dict;
        for (size_t i = 0; i < expr.keys.size(); ++i) {
          const Value key = eval(*expr.keys[i], scope);
          if (!key.is_string())
            problem("dict keys must be strings in chat templates, got a " + key.type_name());
          dict.set(key.as_string(), eval(*expr.items[i], scope));
        }
        return Value::dict(std::move(dict));
      }
      case Expr::Kind::Attribute:
        return get_attribute(eval(*expr.object, scope), expr.name);
      case Expr::Kind::Subscript:
        return get_item(eval(*expr.object, scope), eval(*expr.left, scope));
      case Expr::Kind::Slice: {
        const Value object = eval(*expr.object, scope);
        Value parts[3];
        for (size_t i = 0; i < 3; ++i)
          if (expr.items[i]) parts[i] = eval(*expr.items[i], scope);
        return get_slice(object, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::Call:
        return eval_call(expr, scope, nullptr);
      case Expr::Kind::Filter: {
        const Value input = eval(*expr.object, scope);
        CallArgs args = eval_arguments(expr.arguments, scope);
        return apply_filter(expr.name, input, args);
      }
      case Expr::Kind::Test: {
        const Value input = eval(*expr.object, scope);
        CallArgs args = eval_arguments(expr.arguments, scope);
        return Value(apply_test(expr.name, input, args) != expr.negated);
      }
      case Expr::Kind::Unary: {
        const Value value = eval(*expr.object, scope);
        if (expr.name == "not") return Value(!value.truthy());
        if (value.is_int() || value.is_bool()) {
          const int64_t v = value.is_bool() ? value.as_bool() : value.as_int();
          if (expr.name == "+") return Value(v);
          if (v == INT64_MIN) problem("integer overflow");
          return Value(-v);
        }
        if (value.is_float())
          return Value(expr.name == "-" ? -value.as_number() : value.as_number());
        if (value.is_undefined()) problem("'" + value.undefined_name() + "' is undefined");
        problem("bad operand type for unary " + expr.name + ": " + value.type_name());
      }
      case Expr::Kind::Binary: {
        const std::string& op = expr.name;
        const Value left = eval(*expr.left, scope);
        if (op == "and") return left.truthy() ? eval(*expr.right, scope) : left;
        if (op == "or") return left.truthy() ? left : eval(*expr.right, scope);
        const Value right = eval(*expr.right, scope);
        if (op == "==") return Value(equal(left, right));
        if (op == "!=") return Value(!equal(left, right));
        if (op == "<") return Value(less(left, right));
        if (op == ">") return Value(less(right, left));
        if (op == "<=") return Value(!less(right, left));
        if (op == ">=") return Value(!less(left, right));
        if (op == "in") return Value(contains(right, left));
        if (op == "not in") return Value(!contains(right, left));
        if (op == "~") return bounded(to_str(left) + to_str(right));
        return arithmetic(op, left, right);
      }
      case Expr::Kind::Conditional:
        if (eval(*expr.items[1], scope).truthy()) return eval(*expr.items[0], scope);
        return expr.items[2] ? eval(*expr.items[2], scope) : Value::undefined("");
    }
    return Value();
  }

  const std::string& origin_;
  const RenderOptions& options_;
  std::vector<std::string> buffers_;
  std::vector<std::pair<size_t, size_t>> spans_;
  std::vector<ScopePtr> captured_scopes_;
  std::vector<Value> namespaces_;
  int64_t steps_ = 0;
  size_t output_bytes_ = 0;
  int call_depth_ = 0;
};

}  // namespace

Template::Template(const std::string& source, std::string origin) : origin_(std::move(origin)) {
  if (const auto bad = utf8::find_invalid(source))
    throw Error("[chat template] ", origin_, ": invalid UTF-8 at byte ", *bad);
  body_ = std::make_shared<const Body>(parse_template(source, origin_));
  has_generation_ = walk_has_generation(*body_);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

Rendered Template::render(const Dict& variables, const RenderOptions& options) const {
  return Renderer(origin_, options).run(*body_, variables);
}

}  // namespace tandem::jinja
