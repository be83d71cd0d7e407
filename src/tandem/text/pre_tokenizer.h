#pragma once
// Pre-tokenizers of a byte-level tokenizer.json: any number of `Split` steps (regex or literal,
// each HF delimiter behaviour, `invert`) followed by one `ByteLevel` (optional prefix space, the
// GPT-2 regex), as a single step or a `Sequence`.
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/text/regex.h"

namespace tandem {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

/// One `Split` step: which parts of a text survive, as byte ranges (HF NormalizedString::split).
struct SplitStep {
  std::shared_ptr<const Regex> regex;
  SplitBehavior behavior;
  bool invert;

  /// Appends the non-empty parts of `text`, offset by `base`.
  void apply(std::string_view text, size_t base, std::vector<Match>& parts) const;
};

class PreTokenizer {
 public:
  /// Reads tokenizer.json's `pre_tokenizer`; `where` prefixes errors.
  PreTokenizer(const nlohmann::json& config, const std::string& where);

  /// Splits `text` with the Split steps: sets `pieces` to the byte ranges of the pieces.
  void split(std::string_view text, std::vector<Match>& pieces) const;
  /// ByteLevel's `add_prefix_space`: prepend ' ' to each piece that does not start with one.
  bool add_prefix_space() const { return add_prefix_space_; }
  /// Splits one (prefixed) piece with the GPT-2 regex when ByteLevel has use_regex.
  void split_byte_level(std::string_view piece, std::vector<Match>& words) const;

 private:
  void add_step(const nlohmann::json& step, const std::string& where);

  std::vector<SplitStep> splits_;
  bool has_byte_level_ = false;
  bool add_prefix_space_ = false;
  std::optional<SplitStep> byte_level_split_;  // GPT-2 regex, Isolated; unset without use_regex
};

}  // namespace tandem
