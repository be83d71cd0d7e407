#pragma once
// The parsed form of a chat template: expressions and statements, each with the line and column
// it starts at (errors name them).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/text/jinja_value.h"

namespace tandem::jinja {

struct Position {
  int line = 1, column = 1;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

/// name=value arguments of a call, a filter or a test.
struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Expr {
  enum class Kind {
    Literal,      // value
    Name,         // name
    List,         // items (tuple: is_tuple)
    DictLit,      // keys, items
    Attribute,    // object.name
    Subscript,    // object[index]
    Slice,        // object[start:stop:step] (items: start, stop, step; null when absent)
    Call,         // object(arguments)
    Filter,       // object | name(arguments)
    Test,         // object is [not] name(arguments)
    Unary,        // op object: "not", "-", "+"
    Binary,       // left op right: or and == != < <= > >= in "not in" + - * / // % ** ~
    Conditional,  // items[0] if items[1] else items[2] (items[2] null when absent)
  };
  Kind kind;
  Position at;
  Value value;            // Literal
  std::string name;       // Name, Attribute, Filter, Test; Unary / Binary: the operator
  bool negated = false;   // Test: "is not"
  bool is_tuple = false;  // List
  ExprPtr object, left, right;
  std::vector<ExprPtr> items;  // List, Slice, Conditional; DictLit values
  std::vector<ExprPtr> keys;   // DictLit
  Arguments arguments;         // Call, Filter, Test
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParameter {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind {
    Text,         // text
    Output,       // {{ expr }}
    If,           // branches: (condition, body)...; else_body
    For,          // targets in expr [if condition]: body [else else_body]
    Set,          // targets = expr, or target.attribute = expr (attribute non-empty)
    SetBlock,     // {% set target %}body{% endset %} (optionally | filters via filter_expr)
    Macro,        // name(parameters): body
    CallBlock,    // {% call(parameters) expr %}body{% endcall %}
    FilterBlock,  // {% filter name(args) | ... %}body{% endfilter %}: filter_expr on a
                  // placeholder Name "__block__"
    Generation,   // {% generation %}body{% endgeneration %}
    Break,
    Continue,
  };
  Kind kind;
  Position at;
  std::string text;                  // Text
  std::string name;                  // Macro; SetBlock target; Set attribute
  std::vector<std::string> targets;  // For, Set
  ExprPtr expr;                      // Output, For iterable, Set value, CallBlock call, Set object
  ExprPtr condition;                 // For's filter
  ExprPtr filter_expr;               // FilterBlock / SetBlock filters
  std::vector<std::pair<ExprPtr, Body>> branches;  // If
  Body body, else_body;
  std::vector<MacroParameter> parameters;  // Macro, CallBlock
};

}  // namespace tandem::jinja
