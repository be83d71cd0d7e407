#include "tandem/text/added_vocabulary.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "tandem/text/utf8.h"

namespace tandem {

namespace {

// Rust regex's \w (HF tests single_word with `^\w` / `\w$`): Alphabetic, marks, decimal digits,
// connector punctuation, join controls.
bool is_word_char(char32_t cp) {
  if (cp < 0x80)
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  static pcre2_code* word = [] {
    const char* pattern = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]";
    int error = 0;
    PCRE2_SIZE offset = 0;
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  }();
  thread_local pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  std::string encoded;
  utf8::append(encoded, cp);
  return pcre2_match(word, reinterpret_cast<PCRE2_SPTR>(encoded.data()), encoded.size(), 0,
                     PCRE2_ANCHORED, data, nullptr) > 0;
}

char32_t last_char(std::string_view text) {
  size_t begin = text.size() - 1;
  while (begin > 0 && utf8::is_continuation(static_cast<unsigned char>(text[begin]))) --begin;
  return utf8::next(text, begin);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<const AddedToken*>& tokens,
                                     const std::vector<std::string>& patterns)
    : tokens_(tokens) {
  std::fill(std::begin(root_children_), std::end(root_children_), -1);
  nodes_.emplace_back();
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& pattern = patterns[t];
    if (pattern.empty()) continue;
    int32_t node = 0;
    for (unsigned char byte : pattern) {
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        if (node == 0) {
          root_children_[byte] = next;
        } else {
          auto& children = nodes_[node].children;
          children.insert(
              std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1})),
              {byte, next});
        }
      }
      node = next;
    }
    nodes_[node].token = static_cast<int32_t>(t);  // a later duplicate pattern wins
  }
}

int32_t AddedTokenMatcher::child(int32_t node, unsigned char byte) const {
  if (node == 0) return root_children_[byte];
  const auto& children = nodes_[node].children;
  const auto it =
      std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1}));
  return it != children.end() && it->first == byte ? it->second : -1;
}

void AddedTokenMatcher::find(std::string_view text, std::vector<AddedMatch>& matches) const {
  if (nodes_.empty() || text.empty()) return;
  // Leftmost-longest, non-overlapping (daachorse's MatchKind::LeftmostLongest).
  struct Raw {
    int32_t token;
    size_t begin, end;
  };
  std::vector<Raw> raw;
  for (size_t pos = 0; pos < text.size();) {
    int32_t node = root_children_[static_cast<unsigned char>(text[pos])];
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t i = pos + 1; node >= 0; ++i) {
      if (nodes_[node].token >= 0) {
        best = nodes_[node].token;
        best_end = i;
      }
      if (i >= text.size()) break;
      node = child(node, static_cast<unsigned char>(text[i]));
    }
    if (best >= 0) {
      raw.push_back({best, pos, best_end});
      pos = best_end;
    } else {
      ++pos;
    }
  }

  size_t start_offset = 0;
  for (const Raw& m : raw) {
    const AddedToken& token = *tokens_[m.token];
    size_t begin = m.begin, end = m.end;
    if (token.single_word) {
      const bool space_before = begin == 0 || !is_word_char(last_char(text.substr(0, begin)));
      size_t after = end;
      const bool space_after = end == text.size() || !is_word_char(utf8::next(text, after));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) {
      size_t stripped = begin;
      while (stripped > 0 && utf8::is_whitespace(last_char(text.substr(0, stripped)))) {
        --stripped;
        while (utf8::is_continuation(static_cast<unsigned char>(text[stripped]))) --stripped;
      }
      begin = std::max(stripped, start_offset);
    }
    if (token.rstrip) {
      while (end < text.size()) {
        size_t next = end;
        if (!utf8::is_whitespace(utf8::next(text, next))) break;
        end = next;
      }
    }
    matches.push_back({token.id, begin, end});
    start_offset = end;
  }
}

}  // namespace tandem
