#pragma once
// Splits a chat template into text and the tokens of its tags, with Jinja's whitespace control
// as transformers configures it: trim_blocks (the first newline after a block or comment tag is
// dropped) and lstrip_blocks (spaces and tabs before a block or comment tag on its own line are
// dropped), `-` on a tag strips all whitespace on that side, `+` turns lstrip_blocks (or
// trim_blocks) off for that tag. Comments are dropped; `{% raw %}` blocks become text. As in
// Jinja, newlines are normalised to \n and one newline at the template's end is dropped.
#include <string>
#include <string_view>
#include <vector>

#include "tandem/text/jinja_ast.h"

namespace tandem::jinja {

struct Token {
  enum class Kind {
    Text,           // text: template text between tags
    VariableBegin,  // {{
    VariableEnd,    // }}
    BlockBegin,     // {%
    BlockEnd,       // %}
    Name,           // text: an identifier
    String,         // text: the decoded literal
    Integer,        // integer
    Float,          // number
    Operator,       // text: ( ) [ ] { } , . : | = + - * / // % ** ~ == != < <= > >=
    End,
  };
  Kind kind;
  Position at;
  std::string text;
  int64_t integer = 0;
  double number = 0;
};

/// The tokens of `source`; throws Error("[chat template] <origin>:<line>:<column>: ...") on an
/// unterminated tag, string or comment, or a character no expression has.
std::vector<Token> tokenize(std::string_view source, const std::string& origin);

}  // namespace tandem::jinja
