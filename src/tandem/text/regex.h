#pragma once
// The pre-tokenizer regexes of tokenizer.json files (written for Oniguruma, HF's engine) compiled
// with PCRE2 (UTF + UCP + JIT), with Oniguruma's find_iter semantics and Unicode classes.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem {

/// Byte range [first, second) of a match.
using Match = std::pair<size_t, size_t>;

class Regex {
 public:
  /// Compiles `pattern` (a literal string when `literal`). \s, \d, \w and \p{<general category>}
  /// are widened to what Oniguruma matches (its Unicode data is newer than PCRE2's). Throws
  /// Error naming `what` when the pattern does not compile.
  Regex(std::string_view pattern, bool literal, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// Appends the successive non-overlapping matches in `text` (valid UTF-8) to `matches`; an
  /// empty match right where the previous match ended is skipped, as Oniguruma's find_iter does.
  void find_all(std::string_view text, std::vector<Match>& matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

/// `pattern` with \s, \d, \w, \p{X} replaced by classes matching what Oniguruma matches.
std::string widen_unicode_classes(std::string_view pattern);

}  // namespace tandem
