#pragma once
// Pre-tokenizers of a tokenizer.json: any number of `Split` steps (regex or literal, each HF
// delimiter behaviour, `invert`), then at most one of `ByteLevel` (optional prefix space, the GPT-2
// regex: a byte-level BPE) or `Metaspace` (spaces become "▁", a "▁" prepended always, first or
// never, optionally split before each "▁": a SentencePiece-style BPE), as a single step or a
// `Sequence`; null is none (a SentencePiece-style BPE whose normalizer does the "▁" work).
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/text/regex.h"
#include "tandem/text/segment.h"

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

/// Metaspace's settings, as a pre-tokenizer or a decoder reads them (HF 0.23: `prepend_scheme`
/// always by default; the legacy `add_prefix_space` must agree with it; `split` true by default).
struct MetaspaceSettings {
  enum Prepend { kAlways, kFirst, kNever };
  std::string replacement;  // one character, "▁" in every published file
  Prepend prepend = kAlways;
  bool split = true;

  static MetaspaceSettings read(const nlohmann::json& step, const std::string& where);
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

  /// Whether the last step is ByteLevel (the model then works on byte-level spelled bytes).
  bool byte_level() const { return has_byte_level_; }
  /// Metaspace, when it is the last step.
  const std::optional<MetaspaceSettings>& metaspace() const { return metaspace_; }
  /// Metaspace on one piece: spaces replaced, the prefix added as its scheme says (`first`: only
  /// to a piece that starts the input), into `storage`; `words` gets the ranges to tokenize.
  Segment apply_metaspace(const Segment& piece, AlignedText& storage,
                          std::vector<Match>& words) const;

 private:
  void add_step(const nlohmann::json& step, const std::string& where);

  std::vector<SplitStep> splits_;
  bool has_byte_level_ = false;
  bool add_prefix_space_ = false;
  std::optional<SplitStep> byte_level_split_;  // GPT-2 regex, Isolated; unset without use_regex
  std::optional<MetaspaceSettings> metaspace_;
  std::optional<SplitStep> metaspace_split_;  // the replacement, MergedWithNext
};

}  // namespace tandem
