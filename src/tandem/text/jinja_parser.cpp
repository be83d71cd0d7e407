#include "tandem/text/jinja_parser.h"

#include <set>

#include "tandem/core/error.h"
#include "tandem/text/jinja_lexer.h"

namespace tandem::jinja {

namespace {

// Nesting bound for expressions and statements: a hostile template of 100,000 '(' must be an
// error, not a stack overflow.
constexpr int kMaxNesting = 200;

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& origin)
      : tokens_(std::move(tokens)), origin_(origin) {}

  Body run() {
    Body body = parse_body({});
    if (current().kind != Token::Kind::End)
      fail(current().at, "unexpected '{% " + current().text + " %}'");
    return body;
  }

 private:
  struct Depth {
    explicit Depth(Parser& parser) : parser_(parser) {
      if (++parser_.depth_ > kMaxNesting)
        parser_.fail(parser_.current().at,
                     "the template nests deeper than " + std::to_string(kMaxNesting) + " levels");
    }
    ~Depth() { --parser_.depth_; }
    Parser& parser_;
  };

  const Token& current() const { return tokens_[index_]; }
  const Token& peek(size_t ahead = 1) const {
    return tokens_[std::min(index_ + ahead, tokens_.size() - 1)];
  }
  void advance() {
    if (index_ + 1 < tokens_.size()) ++index_;
  }

  [[noreturn]] void fail(Position at, const std::string& message) const {
    throw Error("[chat template] ", origin_, ":", at.line, ":", at.column, ": ", message);
  }

  static std::string describe(const Token& token) {
    switch (token.kind) {
      case Token::Kind::Text:
        return "text";
      case Token::Kind::VariableBegin:
        return "'{{'";
      case Token::Kind::VariableEnd:
        return "'}}'";
      case Token::Kind::BlockBegin:
        return "'{%'";
      case Token::Kind::BlockEnd:
        return "'%}'";
      case Token::Kind::Name:
        return "'" + token.text + "'";
      case Token::Kind::String:
        return "a string";
      case Token::Kind::Integer:
      case Token::Kind::Float:
        return "a number";
      case Token::Kind::Operator:
        return "'" + token.text + "'";
      case Token::Kind::End:
        return "the end of the template";
    }
    return "a token";
  }

  bool at_operator(std::string_view op) const {
    return current().kind == Token::Kind::Operator && current().text == op;
  }
  bool at_name(std::string_view name) const {
    return current().kind == Token::Kind::Name && current().text == name;
  }
  void expect_operator(std::string_view op) {
    if (!at_operator(op))
      fail(current().at, "expected '" + std::string(op) + "', found " + describe(current()));
    advance();
  }
  std::string expect_name(const char* what) {
    if (current().kind != Token::Kind::Name)
      fail(current().at, std::string("expected ") + what + ", found " + describe(current()));
    std::string name = current().text;
    advance();
    return name;
  }
  void expect_block_end() {
    if (current().kind != Token::Kind::BlockEnd)
      fail(current().at, "expected '%}', found " + describe(current()));
    advance();
  }

  // Statements up to a block tag whose keyword is in `ends` (not consumed) or the end.
  Body parse_body(const std::set<std::string>& ends) {
    Depth depth(*this);
    Body body;
    while (true) {
      const Token& token = current();
      if (token.kind == Token::Kind::End) {
        if (!ends.empty())
          fail(token.at,
               "the template ends inside a block; expected '{% " + *ends.begin() + " %}'");
        return body;
      }
      if (token.kind == Token::Kind::Text) {
        auto stmt = make(Stmt::Kind::Text, token.at);
        stmt->text = token.text;
        body.push_back(std::move(stmt));
        advance();
      } else if (token.kind == Token::Kind::VariableBegin) {
        auto stmt = make(Stmt::Kind::Output, token.at);
        advance();
        stmt->expr = parse_expression();
        if (current().kind != Token::Kind::VariableEnd)
          fail(current().at, "expected '}}', found " + describe(current()));
        advance();
        body.push_back(std::move(stmt));
      } else if (token.kind == Token::Kind::BlockBegin) {
        const Token& keyword = peek();
        if (keyword.kind != Token::Kind::Name) fail(keyword.at, "expected a statement after '{%'");
        if (ends.count(keyword.text)) return body;
        advance();
        body.push_back(parse_statement());
      } else {
        fail(token.at, "unexpected " + describe(token));
      }
    }
  }

  static StmtPtr make(Stmt::Kind kind, Position at) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = kind;
    stmt->at = at;
    return stmt;
  }

  // At the keyword after '{%'.
  StmtPtr parse_statement() {
    const Token keyword = current();
    advance();
    const std::string& k = keyword.text;
    if (k == "if") return parse_if(keyword.at);
    if (k == "for") return parse_for(keyword.at);
    if (k == "set") return parse_set(keyword.at);
    if (k == "macro") return parse_macro(keyword.at);
    if (k == "call") return parse_call_block(keyword.at);
    if (k == "filter") return parse_filter_block(keyword.at);
    if (k == "generation") {
      auto stmt = make(Stmt::Kind::Generation, keyword.at);
      expect_block_end();
      stmt->body = parse_body({"endgeneration"});
      close("endgeneration");
      return stmt;
    }
    if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) fail(keyword.at, "'" + k + "' outside a for loop");
      auto stmt = make(k == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, keyword.at);
      expect_block_end();
      return stmt;
    }
    static const std::set<std::string> kEnds = {"endif",   "endfor",    "endset",        "endmacro",
                                                "endcall", "endfilter", "endgeneration", "elif",
                                                "else",    "endraw"};
    if (kEnds.count(k)) fail(keyword.at, "'{% " + k + " %}' without the block it closes");
    fail(keyword.at, "the statement '" + k +
                         "' is not supported in chat templates (supported: if, for, set, macro, "
                         "call, filter, generation, raw, break, continue)");
  }

  // Consumes "{% name %}".
  void close(const std::string& name) {
    if (current().kind != Token::Kind::BlockBegin ||
        !(peek().kind == Token::Kind::Name && peek().text == name))
      fail(current().at, "expected '{% " + name + " %}'");
    advance();
    advance();
    expect_block_end();
  }

  StmtPtr parse_if(Position at) {
    auto stmt = make(Stmt::Kind::If, at);
    ExprPtr condition = parse_expression();
    expect_block_end();
    while (true) {
      Body body = parse_body({"elif", "else", "endif"});
      stmt->branches.emplace_back(std::move(condition), std::move(body));
      advance();  // '{%'
      const std::string keyword = current().text;
      advance();
      if (keyword == "elif") {
        condition = parse_expression();
        expect_block_end();
        continue;
      }
      if (keyword == "else") {
        expect_block_end();
        stmt->else_body = parse_body({"endif"});
        close("endif");
      } else {
        expect_block_end();
      }
      return stmt;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> targets;
    const bool parenthesised = at_operator("(");
    if (parenthesised) advance();
    targets.push_back(expect_name("a variable name"));
    while (at_operator(",")) {
      advance();
      if (current().kind != Token::Kind::Name) break;  // a trailing comma
      targets.push_back(expect_name("a variable name"));
    }
    if (parenthesised) expect_operator(")");
    return targets;
  }

  StmtPtr parse_for(Position at) {
    auto stmt = make(Stmt::Kind::For, at);
    stmt->targets = parse_targets();
    if (!at_name("in"))
      fail(current().at, "expected 'in' in the for loop, found " + describe(current()));
    advance();
    stmt->expr = parse_expression(/*with_condition=*/false);
    if (at_name("if")) {
      advance();
      stmt->condition = parse_expression();
    }
    if (at_name("recursive")) fail(current().at, "recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    stmt->body = parse_body({"else", "endfor"});
    --loop_depth_;
    advance();
    const std::string keyword = current().text;
    advance();
    expect_block_end();
    if (keyword == "else") {
      stmt->else_body = parse_body({"endfor"});
      close("endfor");
    }
    return stmt;
  }

  StmtPtr parse_set(Position at) {
    // {% set ns.attr = expr %}, {% set a, b = expr %}, {% set name = expr %},
    // {% set name %}...{% endset %}, {% set name | filter %}...{% endset %}
    if (current().kind == Token::Kind::Name && peek().kind == Token::Kind::Operator &&
        peek().text == ".") {
      auto stmt = make(Stmt::Kind::Set, at);
      stmt->targets.push_back(expect_name("a namespace"));
      advance();  // '.'
      stmt->name = expect_name("an attribute name");
      expect_operator("=");
      stmt->expr = parse_expression();
      expect_block_end();
      return stmt;
    }
    std::vector<std::string> targets = parse_targets();
    if (at_operator("=")) {
      advance();
      auto stmt = make(Stmt::Kind::Set, at);
      stmt->targets = std::move(targets);
      stmt->expr = parse_expression();
      if (at_operator(",")) stmt->expr = parse_tuple_rest(std::move(stmt->expr));
      expect_block_end();
      return stmt;
    }
    if (targets.size() != 1) fail(at, "a block set takes one variable name");
    auto stmt = make(Stmt::Kind::SetBlock, at);
    stmt->name = targets[0];
    if (at_operator("|")) stmt->filter_expr = parse_filters(block_placeholder(current().at));
    expect_block_end();
    stmt->body = parse_body({"endset"});
    close("endset");
    return stmt;
  }

  static ExprPtr block_placeholder(Position at) {
    auto expr = std::make_unique<Expr>();
    expr->kind = Expr::Kind::Name;
    expr->at = at;
    expr->name = "__block__";
    return expr;
  }

  std::vector<MacroParameter> parse_parameters() {
    std::vector<MacroParameter> parameters;
    expect_operator("(");
    while (!at_operator(")")) {
      MacroParameter parameter;
      parameter.name = expect_name("a parameter name");
      if (at_operator("=")) {
        advance();
        parameter.default_value = parse_expression();
      }
      parameters.push_back(std::move(parameter));
      if (!at_operator(",")) break;
      advance();
    }
    expect_operator(")");
    return parameters;
  }

  StmtPtr parse_macro(Position at) {
    auto stmt = make(Stmt::Kind::Macro, at);
    stmt->name = expect_name("the macro's name");
    stmt->parameters = parse_parameters();
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    stmt->body = parse_body({"endmacro"});
    loop_depth_ = saved;
    close("endmacro");
    return stmt;
  }

  StmtPtr parse_call_block(Position at) {
    auto stmt = make(Stmt::Kind::CallBlock, at);
    if (at_operator("(")) stmt->parameters = parse_parameters();
    stmt->expr = parse_expression();
    if (stmt->expr->kind != Expr::Kind::Call) fail(at, "'{% call %}' needs a macro call");
    expect_block_end();
    stmt->body = parse_body({"endcall"});
    close("endcall");
    return stmt;
  }

  StmtPtr parse_filter_block(Position at) {
    auto stmt = make(Stmt::Kind::FilterBlock, at);
    stmt->filter_expr = parse_filter_chain(block_placeholder(at), /*first_without_bar=*/true);
    expect_block_end();
    stmt->body = parse_body({"endfilter"});
    close("endfilter");
    return stmt;
  }

  // ---- expressions -------------------------------------------------------------------------

  static ExprPtr make_expr(Expr::Kind kind, Position at) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->at = at;
    return expr;
  }

  ExprPtr parse_expression(bool with_condition = true) {
    Depth depth(*this);
    ExprPtr expr = parse_or();
    if (with_condition && at_name("if")) {
      const Position at = current().at;
      advance();
      auto conditional = make_expr(Expr::Kind::Conditional, at);
      conditional->items.push_back(std::move(expr));
      conditional->items.push_back(parse_or());
      if (at_name("else")) {
        advance();
        conditional->items.push_back(parse_expression());
      } else {
        conditional->items.push_back(nullptr);
      }
      return conditional;
    }
    return expr;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, Position at) {
    auto expr = make_expr(Expr::Kind::Binary, at);
    expr->name = std::move(op);
    expr->left = std::move(left);
    expr->right = std::move(right);
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      const Position at = current().at;
      advance();
      left = binary("or", std::move(left), parse_and(), at);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      const Position at = current().at;
      advance();
      left = binary("and", std::move(left), parse_not(), at);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      Depth depth(*this);
      const Position at = current().at;
      advance();
      auto expr = make_expr(Expr::Kind::Unary, at);
      expr->name = "not";
      expr->object = parse_not();
      return expr;
    }
    return parse_compare();
  }

  // The comparison operator at the current token ("" if none); consumes it when `take`.
  std::string comparison(bool take) {
    std::string op;
    size_t length = 1;
    if (current().kind == Token::Kind::Operator &&
        (current().text == "==" || current().text == "!=" || current().text == "<" ||
         current().text == "<=" || current().text == ">" || current().text == ">="))
      op = current().text;
    else if (at_name("in"))
      op = "in";
    else if (at_name("not") && peek().kind == Token::Kind::Name && peek().text == "in")
      op = "not in", length = 2;
    if (take)
      for (size_t i = 0; i < length && !op.empty(); ++i) advance();
    return op;
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    const Position at = current().at;
    const std::string op = comparison(true);
    if (op.empty()) return left;
    left = binary(op, std::move(left), parse_math1(), at);
    if (!comparison(false).empty())
      fail(current().at, "chained comparisons are not supported; write them with 'and'");
    return left;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (at_operator("+") || at_operator("-")) {
      const std::string op = current().text;
      const Position at = current().at;
      advance();
      left = binary(op, std::move(left), parse_concat(), at);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (at_operator("~")) {
      const Position at = current().at;
      advance();
      left = binary("~", std::move(left), parse_math2(), at);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (at_operator("*") || at_operator("/") || at_operator("//") || at_operator("%")) {
      const std::string op = current().text;
      const Position at = current().at;
      advance();
      left = binary(op, std::move(left), parse_pow(), at);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (at_operator("**")) {
      const Position at = current().at;
      advance();
      left = binary("**", std::move(left), parse_unary(true), at);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    Depth depth(*this);
    ExprPtr expr;
    if (at_operator("-") || at_operator("+")) {
      const Position at = current().at;
      const std::string op = current().text;
      advance();
      expr = make_expr(Expr::Kind::Unary, at);
      expr->name = op;
      expr->object = parse_unary(false);
    } else {
      expr = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_expr(std::move(expr)) : std::move(expr);
  }

  ExprPtr parse_primary() {
    const Token token = current();
    switch (token.kind) {
      case Token::Kind::Name: {
        advance();
        if (token.text == "true" || token.text == "True") return literal(Value(true), token.at);
        if (token.text == "false" || token.text == "False") return literal(Value(false), token.at);
        if (token.text == "none" || token.text == "None") return literal(Value::none(), token.at);
        auto expr = make_expr(Expr::Kind::Name, token.at);
        expr->name = token.text;
        return expr;
      }
      case Token::Kind::String: {
        std::string text = token.text;
        advance();
        while (current().kind == Token::Kind::String) {  // adjacent literals join
          text += current().text;
          advance();
        }
        return literal(Value(std::move(text)), token.at);
      }
      case Token::Kind::Integer:
        advance();
        return literal(Value(token.integer), token.at);
      case Token::Kind::Float:
        advance();
        return literal(Value(token.number), token.at);
      case Token::Kind::Operator:
        if (token.text == "(") {
          advance();
          if (at_operator(")")) {
            advance();
            auto tuple = make_expr(Expr::Kind::List, token.at);
            tuple->is_tuple = true;
            return tuple;
          }
          ExprPtr inner = parse_expression();
          if (at_operator(",")) inner = parse_tuple_rest(std::move(inner));
          expect_operator(")");
          return inner;
        }
        if (token.text == "[") {
          advance();
          auto list = make_expr(Expr::Kind::List, token.at);
          while (!at_operator("]")) {
            list->items.push_back(parse_expression());
            if (!at_operator(",")) break;
            advance();
          }
          expect_operator("]");
          return list;
        }
        if (token.text == "{") {
          advance();
          auto dict = make_expr(Expr::Kind::DictLit, token.at);
          while (!at_operator("}")) {
            dict->keys.push_back(parse_expression());
            expect_operator(":");
            dict->items.push_back(parse_expression());
            if (!at_operator(",")) break;
            advance();
          }
          expect_operator("}");
          return dict;
        }
        break;
      default:
        break;
    }
    fail(token.at, "expected an expression, found " + describe(token));
  }

  // After "first,": the rest of a tuple (a trailing comma allowed).
  ExprPtr parse_tuple_rest(ExprPtr first) {
    auto tuple = make_expr(Expr::Kind::List, first->at);
    tuple->is_tuple = true;
    tuple->items.push_back(std::move(first));
    while (at_operator(",")) {
      advance();
      if (at_operator(")") || current().kind == Token::Kind::BlockEnd) break;
      tuple->items.push_back(parse_expression());
    }
    return tuple;
  }

  ExprPtr literal(Value value, Position at) {
    auto expr = make_expr(Expr::Kind::Literal, at);
    expr->value = std::move(value);
    return expr;
  }

  ExprPtr parse_postfix(ExprPtr expr) {
    while (true) {
      const Position at = current().at;
      if (at_operator(".")) {
        advance();
        if (current().kind == Token::Kind::Integer) {  // foo.0 is foo[0]
          auto index = make_expr(Expr::Kind::Subscript, at);
          index->object = std::move(expr);
          index->left = literal(Value(current().integer), current().at);
          advance();
          expr = std::move(index);
          continue;
        }
        auto attribute = make_expr(Expr::Kind::Attribute, at);
        attribute->object = std::move(expr);
        attribute->name = expect_name("an attribute name");
        expr = std::move(attribute);
      } else if (at_operator("[")) {
        advance();
        expr = parse_subscript(std::move(expr), at);
      } else if (at_operator("(")) {
        auto call = make_expr(Expr::Kind::Call, at);
        call->object = std::move(expr);
        call->arguments = parse_arguments();
        expr = std::move(call);
      } else {
        return expr;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object, Position at) {
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (true) {
      if (at_operator("]")) break;
      if (at_operator(":")) {
        is_slice = true;
        if (++part > 2) fail(current().at, "a slice has at most three parts");
        advance();
        continue;
      }
      if (parts[part]) fail(current().at, "expected ':' or ']' in the subscript");
      parts[part] = parse_expression();
    }
    expect_operator("]");
    if (!is_slice) {
      if (!parts[0]) fail(at, "an empty subscript");
      auto index = make_expr(Expr::Kind::Subscript, at);
      index->object = std::move(object);
      index->left = std::move(parts[0]);
      return index;
    }
    auto slice = make_expr(Expr::Kind::Slice, at);
    slice->object = std::move(object);
    for (auto& p : parts) slice->items.push_back(std::move(p));
    return slice;
  }

  Arguments parse_arguments() {
    Arguments arguments;
    expect_operator("(");
    while (!at_operator(")")) {
      if (at_operator("*") || at_operator("**"))
        fail(current().at, "'*' and '**' arguments are not supported");
      if (current().kind == Token::Kind::Name && peek().kind == Token::Kind::Operator &&
          peek().text == "=") {
        std::string name = current().text;
        advance();
        advance();
        arguments.keyword.emplace_back(std::move(name), parse_expression());
      } else {
        if (!arguments.keyword.empty())
          fail(current().at, "a positional argument after a keyword argument");
        arguments.positional.push_back(parse_expression());
      }
      if (!at_operator(",")) break;
      advance();
    }
    expect_operator(")");
    return arguments;
  }

  // Filters ("| name(args)") and tests ("is [not] name args") after a primary.
  ExprPtr parse_filter_expr(ExprPtr expr) {
    while (true) {
      if (at_operator("|")) {
        expr = parse_filters(std::move(expr));
      } else if (at_name("is")) {
        expr = parse_test(std::move(expr));
      } else if (at_operator("(")) {
        expr = parse_postfix(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  ExprPtr parse_filters(ExprPtr expr) { return parse_filter_chain(std::move(expr), false); }

  ExprPtr parse_filter_chain(ExprPtr expr, bool first_without_bar) {
    bool first = true;
    while (at_operator("|") || (first && first_without_bar)) {
      if (!(first && first_without_bar)) advance();
      first = false;
      const Position at = current().at;
      auto filter = make_expr(Expr::Kind::Filter, at);
      filter->name = expect_name("a filter name");
      while (at_operator(".")) {  // dotted filter names do not exist in Jinja's builtins
        advance();
        filter->name += "." + expect_name("a filter name");
      }
      filter->object = std::move(expr);
      if (at_operator("(")) filter->arguments = parse_arguments();
      expr = std::move(filter);
    }
    return expr;
  }

  ExprPtr parse_test(ExprPtr expr) {
    const Position at = current().at;
    advance();  // 'is'
    auto test = make_expr(Expr::Kind::Test, at);
    if (at_name("not")) {
      test->negated = true;
      advance();
    }
    test->name = expect_name("a test name");
    test->object = std::move(expr);
    if (at_operator("(")) {
      test->arguments = parse_arguments();
    } else if ((current().kind == Token::Kind::Name && !at_name("else") && !at_name("or") &&
                !at_name("and") && !at_name("if") && !at_name("is") && !at_name("in") &&
                !at_name("not") && !at_name("recursive")) ||
               current().kind == Token::Kind::String || current().kind == Token::Kind::Integer ||
               current().kind == Token::Kind::Float || at_operator("[") || at_operator("{")) {
      test->arguments.positional.push_back(parse_postfix(parse_primary()));
    }
    return test;
  }

  std::vector<Token> tokens_;
  const std::string& origin_;
  size_t index_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(std::string_view source, const std::string& origin) {
  return Parser(tokenize(source, origin), origin).run();
}

}  // namespace tandem::jinja
