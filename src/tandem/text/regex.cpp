#include "tandem/text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdio>

#include "tandem/core/error.h"
#include "tandem/text/unicode_data.h"
#include "tandem/text/utf8.h"

namespace tandem {

namespace {

namespace ud = unicode_data;

std::string format_ranges(const ud::Range* ranges, size_t count) {
  std::string out;
  char buffer[40];
  for (size_t i = 0; i < count; ++i) {
    if (ranges[i].first == ranges[i].last)
      std::snprintf(buffer, sizeof(buffer), "\\x{%X}", static_cast<unsigned>(ranges[i].first));
    else
      std::snprintf(buffer, sizeof(buffer), "\\x{%X}-\\x{%X}",
                    static_cast<unsigned>(ranges[i].first), static_cast<unsigned>(ranges[i].last));
    out += buffer;
  }
  return out;
}

std::string additions(std::string_view name) {
  for (size_t i = 0; i < ud::kClassAdditionCount; ++i)
    if (name == ud::kClassAdditions[i].name)
      return format_ranges(ud::kClassAdditions[i].ranges, ud::kClassAdditions[i].count);
  return "";
}

bool has_additions(std::string_view name) {
  for (size_t i = 0; i < ud::kClassAdditionCount; ++i)
    if (name == ud::kClassAdditions[i].name) return true;
  return false;
}

// The items (no brackets) of a class equal to Oniguruma's `\<letter>` (s, d, w) or \p{name}.
std::string class_items(char letter, std::string_view name) {
  switch (letter) {
    case 's':
      return format_ranges(ud::kOnigurumaSpace, ud::kOnigurumaSpaceCount);
    case 'd':
      return "\\p{Nd}" + additions("d");
    case 'w':
      return "\\p{L}\\p{M}\\p{Nd}\\p{Pc}" + additions("w");
    default:
      return "\\p{" + std::string(name) + "}" + additions(name);
  }
}

// Thread-local PCRE2 state: match data for the overall match and a JIT stack large enough for
// long whitespace runs under `\s+(?!\S)`.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 512 * 1024 * 1024, nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

std::string widen_unicode_classes(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() * 2);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // literal ]
      continue;
    }
    if (c == '[' && in_class && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t end = pattern.find(":]", i + 2);  // POSIX class [:alpha:]
      if (end != std::string_view::npos) {
        out.append(pattern.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (c == ']' && in_class) {
      in_class = false;
      out += c;
      continue;
    }
    if (c != '\\' || i + 1 >= pattern.size()) {
      out += c;
      continue;
    }
    const char e = pattern[i + 1];
    if (e == 'Q') {  // \Q...\E quotes everything up to \E
      const size_t end = pattern.find("\\E", i + 2);
      const size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
      out.append(pattern.substr(i, stop - i));
      i = stop - 1;
      continue;
    }
    char letter = 0;
    bool negated = false;
    std::string name;
    size_t consumed = 2;
    if (e == 's' || e == 'd' || e == 'w' || e == 'S' || e == 'D' || e == 'W') {
      letter = static_cast<char>(e | 0x20);
      negated = e != letter;
    } else if (e == 'p' || e == 'P') {
      negated = e == 'P';
      if (i + 2 < pattern.size() && pattern[i + 2] == '{') {
        const size_t close = pattern.find('}', i + 3);
        if (close != std::string_view::npos) {
          name = std::string(pattern.substr(i + 3, close - i - 3));
          consumed = close + 1 - i;
          if (!name.empty() && name[0] == '^') {
            negated = !negated;
            name.erase(0, 1);
          }
        }
      } else if (i + 2 < pattern.size()) {
        name = std::string(1, pattern[i + 2]);
        consumed = 3;
      }
      if (has_additions(name)) letter = 'p';
    }
    if (!letter || (in_class && negated)) {
      // Not a class we widen (or a negated one inside [...], which cannot be widened by
      // appending): keep the escape and what follows it as written.
      out.append(pattern.substr(i, consumed));
      i += consumed - 1;
      continue;
    }
    const std::string items = class_items(letter, name);
    if (in_class)
      out += items;
    else
      out += (negated ? "[^" : "[") + items + "]";
    i += consumed - 1;
  }
  return out;
}

Regex::Regex(std::string_view pattern, bool literal, const std::string& what) : pattern_(pattern) {
  const std::string compiled = literal ? std::string(pattern) : widen_unicode_classes(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2_LITERAL admits no PCRE2_UCP (which only matters for classes anyway).
  const uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    throw Error(what, ": pattern '", pattern_,
                "' does not compile: ", reinterpret_cast<const char*>(message), " (offset ",
                error_offset, ")");
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text, std::vector<Match>& matches) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchState& state = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t search_from = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (search_from <= text.size()) {
    const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), search_from, 0, state.data,
                                          state.context)
                        : pcre2_match(code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK,
                                      state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw Error("[tokenizer] regex '", pattern_,
                  "' failed: ", reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (begin == end && have_last && last_end == end) {
      if (search_from >= text.size()) return;
      search_from += utf8::sequence_length(static_cast<unsigned char>(text[search_from]));
      continue;
    }
    matches.emplace_back(begin, end);
    have_last = true;
    last_end = end;
    search_from = end;
  }
}

}  // namespace tandem
