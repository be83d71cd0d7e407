#pragma once
// tokenizer.json's `normalizer`: null, one step or a Sequence of them, each step one of NFC, NFKC
// (normalizer.h), Prepend (a string before non-empty text: SentencePiece's "▁" in Llama-2 and
// Mistral v0.1 files) and Replace (a literal string or a regex, replaced by a string: " " by "▁"
// in Llama-2 and Gemma files), with HF's alignments. Any other type is refused by name.
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/text/normalizer.h"
#include "tandem/text/regex.h"
#include "tandem/text/segment.h"

namespace tandem {

class NormalizerSequence {
 public:
  /// No normalizer.
  NormalizerSequence() = default;
  /// Reads `normalizer` of a tokenizer.json; `where` prefixes errors.
  NormalizerSequence(const nlohmann::json& config, const std::string& where);

  bool empty() const { return steps_.empty(); }

  /// `segment` after every step. The result views `segment` when no step changed it, else
  /// `storage`.
  Segment apply(const Segment& segment, AlignedText& storage) const;
  /// The normalized string only (for added tokens' `normalized` content, as HF normalizes it).
  std::string apply(std::string_view text) const;

 private:
  struct Step {
    enum Kind { kNFC, kNFKC, kPrepend, kReplace } kind;
    std::string text;                      // Prepend: the prefix; Replace: the content
    std::shared_ptr<const Regex> pattern;  // Replace: a literal string or a regex
  };
  void add_step(const nlohmann::json& step, const std::string& where);
  /// One step into `out`; false when it leaves the text as it is.
  bool apply_step(const Step& step, const Segment& in, AlignedText& out) const;

  std::vector<Step> steps_;
};

}  // namespace tandem
