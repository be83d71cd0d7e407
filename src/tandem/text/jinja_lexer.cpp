#include "tandem/text/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "tandem/core/error.h"
#include "tandem/text/utf8.h"

namespace tandem::jinja {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& origin) : source_(source), origin_(origin) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < source.size(); ++i)
      if (source[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool strip_next = false;  // the previous tag ended with '-'
    bool trim_next = false;   // the previous tag was a block or comment: trim_blocks applies
    while (pos < source_.size()) {
      const size_t open = find_tag(pos);
      const std::string_view raw = source_.substr(pos, open - pos);
      std::string text(raw);
      const Position text_at = position(pos);
      const char kind = open < source_.size() ? source_[open + 1] : '\0';  // '{', '%' or '#'
      const char modifier = open + 2 < source_.size() ? source_[open + 2] : '\0';
      // lstrip_blocks: the spaces and tabs before a block or comment tag that has nothing else
      // before it on its line (decided on the template as written).
      size_t lstrip = 0;
      if (open < source_.size() && kind != '{' && modifier != '+' && modifier != '-') {
        const size_t newline = raw.find_last_of('\n');
        const size_t from = newline == std::string_view::npos ? 0 : newline + 1;
        if ((newline != std::string_view::npos || pos == 0) &&
            raw.find_first_not_of(" \t", from) == std::string_view::npos)
          lstrip = raw.size() - from;
      }
      if (strip_next) {
        const size_t first = text.find_first_not_of(" \t\n\r\f\v");
        text.erase(0, first == std::string::npos ? text.size() : first);
      } else if (trim_next) {
        if (text.rfind("\r\n", 0) == 0)
          text.erase(0, 2);
        else if (!text.empty() && (text[0] == '\n' || text[0] == '\r'))
          text.erase(0, 1);
      }
      strip_next = trim_next = false;
      if (open == source_.size()) {
        push_text(std::move(text), text_at);
        break;
      }
      if (modifier == '-') {
        const size_t last = text.find_last_not_of(" \t\n\r\f\v");
        text.erase(last == std::string::npos ? 0 : last + 1);
      } else {
        text.erase(text.size() - std::min(lstrip, text.size()));
      }
      push_text(std::move(text), text_at);
      size_t inner = open + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      if (kind == '#') {
        const size_t close = source_.find("#}", inner);
        if (close == std::string::npos) fail(open, "the comment is never closed with '#}'");
        strip_next = close > inner && source_[close - 1] == '-';
        trim_next = !(close > inner && source_[close - 1] == '+');
        pos = close + 2;
        continue;
      }
      const Position tag_at = position(open);
      tokens_.push_back(
          {kind == '{' ? Token::Kind::VariableBegin : Token::Kind::BlockBegin, tag_at, "", 0, 0});
      const size_t tag_start_index = tokens_.size();
      const TagEnd end = lex_tag(inner, kind == '{' ? '}' : '%', open);
      tokens_.push_back({kind == '{' ? Token::Kind::VariableEnd : Token::Kind::BlockEnd,
                         position(end.at), "", 0, 0});
      strip_next = end.strip;
      trim_next = kind == '%' && !end.keep;
      pos = end.after;
      // {% raw %} ... {% endraw %}: the text between, as written.
      if (kind == '%' && tokens_.size() == tag_start_index + 2 &&
          tokens_[tag_start_index].kind == Token::Kind::Name &&
          tokens_[tag_start_index].text == "raw") {
        tokens_.resize(tag_start_index - 1);
        pos = lex_raw(pos, open, strip_next, trim_next, strip_next, trim_next);
      }
    }
    tokens_.push_back({Token::Kind::End, position(source_.size()), "", 0, 0});
    return std::move(tokens_);
  }

 private:
  struct TagEnd {
    size_t at = 0, after = 0;
    bool strip = false;  // "-%}"
    bool keep = false;   // "+%}": no trim_blocks
  };

  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    const Position at = position(offset);
    throw Error("[chat template] ", origin_, ":", at.line, ":", at.column, ": ", message);
  }

  Position position(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    const size_t start = line_starts_[line - 1];
    // Columns count characters, not bytes.
    int column = 1;
    for (size_t i = start; i < offset && i < source_.size(); ++i)
      if (!utf8::is_continuation(static_cast<unsigned char>(source_[i]))) ++column;
    return {static_cast<int>(line), column};
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < source_.size(); ++i)
      if (source_[i] == '{' &&
          (source_[i + 1] == '{' || source_[i + 1] == '%' || source_[i + 1] == '#'))
        return i;
    return source_.size();
  }

  void push_text(std::string text, Position at) {
    if (!text.empty()) tokens_.push_back({Token::Kind::Text, at, std::move(text), 0, 0});
  }

  // Tokens of a tag's inside from `pos` to its end ("}}" or "%}", optionally "-"/"+" before);
  // the end is recognised only outside brackets.
  TagEnd lex_tag(size_t pos, char closer, size_t open) {
    int depth = 0;
    while (true) {
      while (pos < source_.size() && is_space(source_[pos])) ++pos;
      if (pos >= source_.size())
        fail(open, std::string("the tag is never closed with '") + closer + "}'");
      const char c = source_[pos];
      if (depth == 0) {
        for (const char mark : {'-', '+'})
          if (c == mark && pos + 2 < source_.size() && source_[pos + 1] == closer &&
              source_[pos + 2] == '}')
            return {pos, pos + 3, mark == '-', mark == '+'};
        if (c == closer && pos + 1 < source_.size() && source_[pos + 1] == '}')
          return {pos, pos + 2, false, false};
      }
      const Position at = position(pos);
      if (is_name_start(c)) {
        size_t end = pos;
        while (end < source_.size() && is_name_char(source_[end])) ++end;
        tokens_.push_back(
            {Token::Kind::Name, at, std::string(source_.substr(pos, end - pos)), 0, 0});
        pos = end;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = lex_number(pos, at);
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos, at);
      } else {
        static const char* kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* two : kTwo)
          if (source_.substr(pos, 2) == two) op = two;
        if (op.size() == 1 &&
            std::string_view("()[]{},.:|=+-*/%~<>").find(c) == std::string_view::npos)
          fail(pos, std::string("unexpected character '") + c + "' in a tag");
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        tokens_.push_back({Token::Kind::Operator, at, op, 0, 0});
        pos += op.size();
      }
    }
  }

  size_t lex_number(size_t pos, Position at) {
    size_t end = pos;
    bool is_float = false;
    auto digits = [&] {
      while (end < source_.size() &&
             (std::isdigit(static_cast<unsigned char>(source_[end])) || source_[end] == '_'))
        ++end;
    };
    digits();
    if (end + 1 < source_.size() && source_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(source_[end + 1]))) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < source_.size() && (source_[end] == 'e' || source_[end] == 'E')) {
      size_t exp = end + 1;
      if (exp < source_.size() && (source_[exp] == '+' || source_[exp] == '-')) ++exp;
      if (exp < source_.size() && std::isdigit(static_cast<unsigned char>(source_[exp]))) {
        is_float = true;
        end = exp;
        digits();
      }
    }
    std::string text;
    for (size_t i = pos; i < end; ++i)
      if (source_[i] != '_') text += source_[i];
    Token token{is_float ? Token::Kind::Float : Token::Kind::Integer, at, text, 0, 0};
    if (is_float) {
      token.number = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      token.integer = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(pos, "the integer " + text + " does not fit in 64 bits");
    }
    tokens_.push_back(std::move(token));
    return end;
  }

  size_t lex_string(size_t pos, Position at) {
    const char quote = source_[pos];
    std::string value;
    size_t i = pos + 1;
    while (true) {
      if (i >= source_.size()) fail(pos, "the string is never closed");
      const char c = source_[i];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (i + 1 >= source_.size()) fail(pos, "the string is never closed");
      const char e = source_[i + 1];
      i += 2;
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case 'a':
          value += '\a';
          break;
        case '0':
          value += '\0';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case '\n':
          break;  // a line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t width = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + width > source_.size())
            fail(i, "a \\" + std::string(1, e) + " escape is cut short");
          const std::string hex(source_.substr(i, width));
          if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
            fail(i, "a \\" + std::string(1, e) + " escape needs " + std::to_string(width) +
                        " hex digits");
          const auto code = static_cast<char32_t>(std::strtoul(hex.c_str(), nullptr, 16));
          if (code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
            fail(i, "the escape \\" + std::string(1, e) + hex + " is not a Unicode scalar value");
          utf8::append(value, code);
          i += width;
          break;
        }
        default:  // Python keeps unknown escapes as written
          value += '\\';
          value += e;
      }
    }
    tokens_.push_back({Token::Kind::String, at, std::move(value), 0, 0});
    return i + 1;
  }

  // After "{% raw %}": the text up to "{% endraw %}" as one text token; returns the position
  // after the end tag and sets the whitespace flags its end leaves.
  size_t lex_raw(size_t pos, size_t open, bool strip_in, bool trim_in, bool& strip_out,
                 bool& trim_out) {
    size_t search = pos;
    while (true) {
      const size_t tag = source_.find("{%", search);
      if (tag == std::string::npos) fail(open, "the raw block is never closed with {% endraw %}");
      size_t i = tag + 2;
      const bool strip_before = i < source_.size() && source_[i] == '-';
      if (i < source_.size() && (source_[i] == '-' || source_[i] == '+')) ++i;
      while (i < source_.size() && is_space(source_[i])) ++i;
      if (source_.substr(i, 6) != "endraw") {
        search = tag + 2;
        continue;
      }
      i += 6;
      while (i < source_.size() && is_space(source_[i])) ++i;
      bool strip_after = false, keep = false;
      if (i < source_.size() && (source_[i] == '-' || source_[i] == '+')) {
        strip_after = source_[i] == '-';
        keep = source_[i] == '+';
        ++i;
      }
      if (source_.substr(i, 2) != "%}") fail(tag, "malformed {% endraw %}");
      std::string text(source_.substr(pos, tag - pos));
      if (strip_in) {
        const size_t first = text.find_first_not_of(" \t\n\r\f\v");
        text.erase(0, first == std::string::npos ? text.size() : first);
      } else if (trim_in && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
      }
      if (strip_before) {
        const size_t last = text.find_last_not_of(" \t\n\r\f\v");
        text.erase(last == std::string::npos ? 0 : last + 1);
      }
      push_text(std::move(text), position(pos));
      strip_out = strip_after;
      trim_out = !keep;
      return i + 2;
    }
  }

  std::string_view source_;
  const std::string& origin_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& origin) {
  // As Jinja reads a template: every newline sequence (\r\n, \r, \n) becomes \n, and one
  // newline at the very end is dropped (keep_trailing_newline off).
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(normalized, origin).run();
}

}  // namespace tandem::jinja
